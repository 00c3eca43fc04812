"""The demo planner: a deterministic, offline :class:`~agent.llm.base.ModelClient`.

It behaves like a competent support agent with no network and no key: it reads
the conversation (the latest user text, ``<signoff_event>`` runtime events and
the tool results of the current turn) and proposes the next sensible tool call
for the common intents. It is the *good* planner: it never acts on text found
inside tool results (order notes, help-centre text, names are data), and it
only claims what a tool result or runtime event says happened.

It is stateless: every call re-derives where the turn stands from the request,
so it survives suspend/resume exactly like a real model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.history import EVENT_CLOSE, EVENT_OPEN
from agent.llm.base import Block, ModelRequest, ModelResponse
from agent.llm.testing import make_response, text_block, tool_use_block
from agent.prompt import REP_VOICE
from tools.catalogue import build_registry
from tools.registry import Registry, ToolDef
from tools.results import format_money

#: The sandbox's ``O-1042`` and a Shopify order's name ``#1001``.
_ORDER_ID = re.compile(r"\bO-[0-9A-Za-z]{1,16}\b|#[0-9]{3,12}\b")
_MONEY = re.compile(
    r"(?:[$€£]\s?(\d+(?:\.\d{1,2})?))|"
    r"(?:\b(\d+(?:\.\d{1,2})?)\s?(?:usd|eur|gbp|dollars?|euros?|pounds?)\b)",
    re.I,
)
_STOP = frozenset(
    "a an the i my me we our you your is are was be do does did can could would will how what when "
    "where which who why to of in on for with and or it this that there have has about any if "
    "please hi hello thanks thank long take".split()
)
Reply = list[Block] | str


@dataclass(frozen=True, kw_only=True)
class Call:
    """One tool call and its result as the planner saw it."""

    name: str
    input: dict[str, Any]
    result: Any
    is_error: bool

    @property
    def value(self) -> Any:
        """The result, seeing through a dedup intercept to the earlier result."""
        if isinstance(self.result, dict) and self.result.get("intercepted"):
            return self.result.get("previous_result")
        return self.result


@dataclass(frozen=True, kw_only=True)
class View:
    """What the planner knows: the turn's trigger (user text, events) and the calls since."""

    text: str
    events: tuple[str, ...]
    calls: tuple[Call, ...]
    history: tuple[Call, ...]
    earlier_text: str
    past_events: tuple[str, ...]
    tools: frozenset[str]
    #: What the planner knows of every tool (groups, result ids, how to say it was done).
    catalogue: Registry = field(default_factory=build_registry)

    @property
    def low(self) -> str:
        return self.text.lower()

    def called(self, name: str, **args: Any) -> Call | None:
        """The latest call of ``name`` in this turn whose arguments include ``args``."""
        for c in reversed(self.calls):
            if c.name == name and all(c.input.get(k) == v for k, v in args.items()):
                return c
        return None

    def use(self, name: str, args: dict[str, Any], say: str = "") -> Reply:
        """Call ``name``, loading its group first when it is not offered."""
        tool = self.catalogue.get(name)
        group = tool.meta.group if tool is not None else "always"
        if name not in self.tools and group != "always" and not self.called("load_tools", group=group):
            return [tool_use_block("load_tools", {"group": group})]
        return ([text_block(say)] if say else []) + [tool_use_block(name, args)]

    def order_id(self) -> str | None:
        found = _ORDER_ID.findall(self.text) or _ORDER_ID.findall(self.earlier_text)
        return found[-1] if found else None


def _loads(content: Any) -> Any:
    if isinstance(content, list):
        content = "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    try:
        return json.loads(content)
    except (TypeError, ValueError):
        return content


def _calls(messages: list[Any]) -> list[Call]:
    results = {
        b.get("tool_use_id"): b
        for m in messages
        if m.role == "user"
        for b in m.content
        if b.get("type") == "tool_result"
    }
    out = []
    for m in messages:
        for b in m.content if m.role == "assistant" else []:
            if b.get("type") == "tool_use" and b.get("id") in results:
                r = results[b["id"]]
                out.append(
                    Call(
                        name=b["name"],
                        input=dict(b.get("input") or {}),
                        result=_loads(r.get("content")),
                        is_error=bool(r.get("is_error")),
                    )
                )
    return out


def view_of(request: ModelRequest, catalogue: Registry | None = None) -> View:
    """Split the request into the trigger message (latest user text) and the turn's progress."""
    msgs = request.messages
    at = max(
        (i for i, m in enumerate(msgs) if m.role == "user" and any(b.get("type") == "text" for b in m.content)),
        default=0,
    )
    texts = [str(b.get("text", "")) for b in msgs[at].content if b.get("type") == "text"] if msgs else []
    events = tuple(t[len(EVENT_OPEN) : -len(EVENT_CLOSE)] for t in texts if t.startswith(EVENT_OPEN))
    earlier = [
        str(b.get("text", "")) for m in msgs[:at] if m.role == "user" for b in m.content if b.get("type") == "text"
    ]
    return View(
        text=" ".join(t for t in texts if not t.startswith(EVENT_OPEN)),
        events=events,
        calls=tuple(_calls(msgs[at:])),
        history=tuple(_calls(msgs)),
        earlier_text=" ".join(t for t in earlier if not t.startswith(EVENT_OPEN)),
        past_events=tuple(t for t in earlier if t.startswith(EVENT_OPEN)),
        tools=frozenset(t.name for t in request.tools),
        catalogue=catalogue if catalogue is not None else build_registry(),
    )


class DemoPlanner:
    """A deterministic ModelClient for ``signoff demo`` and ``serve`` without a key."""

    def __init__(self, catalogue: Registry | None = None) -> None:
        self.catalogue = catalogue if catalogue is not None else build_registry()

    @property
    def model_name(self) -> str:
        return "demo-planner"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        reply = plan(view_of(request, self.catalogue))
        if REP_VOICE in request.system:  # the prompt says the reader is a rep: the account is the customer's
            reply = third_person(reply)
        return make_response(reply, model=self.model_name, request=request)


#: The planner's second-person phrases about the account, as said to a rep about the customer.
_THIRD_PERSON = re.compile(r"\b([Yy])our (orders?|account|statement|request|payment|refund)\b")


def third_person(reply: Reply) -> Reply:
    """``reply`` spoken to a rep about the customer: "Your order O-1040" → "The customer's order O-1040"."""

    def say(text: str) -> str:
        return _THIRD_PERSON.sub(lambda m: f"{'T' if m.group(1) == 'Y' else 't'}he customer's {m.group(2)}", text)

    if isinstance(reply, str):
        return say(reply)
    return [text_block(say(str(b.get("text", "")))) if b.get("type") == "text" else b for b in reply]


# -- dispatch ------------------------------------------------------------------------------


def plan(v: View) -> Reply:
    """The next reply for this view."""
    last = v.calls[-1] if v.calls else None
    if last is not None and last.name == "finish":
        return "All done — is there anything else I can help with?"
    if last is not None and last.name == "escalate_to_human":
        sorry = "I'm sorry this has been so frustrating. " if last.input.get("reason") == "complaint" else ""
        return (
            f"{sorry}I've passed your conversation, with everything I checked, to a colleague who will follow "
            "up with you here."
        )
    if len(v.calls) >= 9:
        return v.use("escalate_to_human", {"reason": "cannot_resolve", "summary": v.text[:300] or "Stuck."})
    if v.events:
        return on_event(v, v.events[-1])
    if last is not None and isinstance(last.value, dict) and last.value.get("status") in _STATUS_REPLIES:
        reply = _STATUS_REPLIES[last.value["status"]](last.value)
        return _order_status_line(v) + reply if isinstance(reply, str) else reply
    for n, (words, handler) in enumerate(INTENTS):
        if n == 2 and general_question(v.low):
            return knowledge(v)
        if any(re.search(w, v.low) for w in words):
            return handler(v)
    return "I can help with orders, deliveries, returns, refunds, payments and your account. What can I do for you?"


_STATUS_REPLIES: dict[str, Callable[[dict[str, Any]], Reply]] = {
    "CONFIRMATION_REQUIRED": lambda r: f"I can do this for you: {r.get('action')}. It needs your confirmation.",
    "PENDING_APPROVAL": lambda r: (
        f"This needs a supervisor's approval first: {r.get('action')}. It is pending "
        "review, not done yet — I'll update you here as soon as it is decided."
    ),
    "RECORDED_NOT_EXECUTED": lambda r: (
        f"I've recorded this for a colleague to carry out: {r.get('action')}. Nothing has been done yet."
    ),
}


_STATUS_WORDS = {
    "PENDING": "is waiting for payment",
    "PAID": "is paid and being prepared",
    "SHIPPED": "has shipped",
    "DELIVERED": "was delivered",
    "CANCELLED": "was cancelled",
}


def _order_status_line(v: View) -> str:
    """When the customer asked where an order is, answer that first (from the get_order result)."""
    if not re.search(r"\b(where|status|track|arrive|deliver)", v.low):
        return ""
    for c in reversed(v.history):
        if c.name == "get_order" and isinstance(c.value, dict) and c.value.get("status") in _STATUS_WORDS:
            when = c.value.get("delivered_at") or ""
            on = f" on {when[:10]}" if c.value["status"] == "DELIVERED" and when else ""
            return f"Your order {c.value.get('order_id', '')} {_STATUS_WORDS[c.value['status']]}{on}. "
    return ""


def on_event(v: View, event: str) -> Reply:
    """Report a runtime event (confirmation or approval outcome) truthfully."""
    if m := re.match(
        r"The (?:customer|rep) confirmed: (.*?)\. Outcome: (executed|PENDING_APPROVAL|not executed): "
        r"(.*)$",
        event,
        re.S,
    ):
        summary, kind, body = m.group(1), m.group(2), _loads(m.group(3))
        if kind == "PENDING_APPROVAL":
            return _STATUS_REPLIES["PENDING_APPROVAL"]({"action": summary})
        if kind == "executed":
            return _done(v, summary, body)
        return _failed(summary, body)
    if re.match(r"The (?:customer|rep) declined", event):
        return "Understood — I haven't done anything. Is there something else I can help with?"
    if m := re.match(r"Approval (\S+) was approved by a supervisor\. Outcome: (.*)$", event, re.S):
        body = _loads(m.group(2))
        summary = _summary_for(v, m.group(1))
        if isinstance(body, dict) and body.get("status") not in ("FAILED", "REOPENED"):
            return _done(v, summary, body, approved=True)
        return _failed(summary, body)
    if m := re.match(r"Approval (\S+) was rejected by a supervisor\. Comment: (.*)\. Nothing was done\.", event, re.S):
        return (
            f"A supervisor reviewed your request ({_summary_for(v, m.group(1))}) and did not approve it: "
            f"{m.group(2)}. No money has moved."
        )
    if m := re.match(r"Approval (\S+) expired", event):
        return (
            f"Your request ({_summary_for(v, m.group(1))}) expired before a supervisor could review it, so "
            "nothing was done. I can ask again or pass this to a colleague."
        )
    return "Thanks — I've noted that."


def _summary_for(v: View, approval_id: str) -> str:
    """The action an approval is about, from the tool result or event that reported it pending."""
    for c in reversed(v.history):
        if isinstance(c.value, dict) and c.value.get("approval_id") == approval_id:
            return str(c.value.get("action", "the action"))
    for event in reversed(v.past_events):
        _, _, body = event.partition("PENDING_APPROVAL: ")
        found = _loads(body.removesuffix(EVENT_CLOSE))
        if isinstance(found, dict) and found.get("approval_id") == approval_id:
            return str(found.get("action", "the action"))
    return "the action"


def _source_call(v: View, summary: str) -> Call | None:
    """The tool call whose result reported ``summary`` as its action (confirmation or approval)."""
    return next(
        (c for c in reversed(v.history) if isinstance(c.value, dict) and c.value.get("action") == summary), None
    )


def _done(v: View, summary: str, result: Any, *, approved: bool = False, call: Call | None = None) -> Reply:
    call = call or _source_call(v, summary)
    tool, args = (call.name, call.input) if call else ("", {})
    body = result if isinstance(result, dict) else {}
    amount = format_money(args["amount_minor"], args["currency"]) if "amount_minor" in args else ""
    known: ToolDef | None = v.catalogue.get(tool)
    action = known.action_id(body) if known is not None else None
    said = (known.done_phrase if known is not None else None) or "done it"
    if body.get("replayed"):  # the runtime says this had been done before: nothing new happened
        when = str(body.get("original_at") or "")[:10]
        return (
            f"That was already done earlier{' on ' + when if when else ''} (reference {action}), with exactly "
            "these details, so nothing new happened now."
        )
    phrase = said.format(amount=amount, order=args.get("order_id", ""), id=action)
    lead = "Good news: a supervisor approved it and I've " if approved else "Done — I've "
    ref = f" (reference {action})" if action and action not in phrase else ""
    say = f"{lead}{phrase}{ref}."
    if tool == "issue_refund":
        say += " It usually shows on your statement within 5–10 business days."
    resolution = " ".join(said.format(amount=amount, order=args.get("order_id", ""), id="").split())
    finish = {
        "resolution": f"I {resolution}."[:1000],
        "action_ids": [action] if action else [],
        "sources": list(args.get("evidence") or []),
    }
    return [text_block(say), tool_use_block("finish", finish)]


def _failed(summary: str, body: Any) -> str:
    reason = body.get("error") or body.get("reason") if isinstance(body, dict) else None
    return (
        f"I couldn't complete this: {summary}. Nothing was done ({reason or 'a check failed'}). "
        "Would you like me to pass it to a colleague?"
    )


# -- intents --------------------------------------------------------------------------------


def escalate(v: View) -> Reply:
    distressed = any(w in v.low for w in _DISTRESS)
    reason = "complaint" if distressed else "customer_request"
    lead = "I'm really sorry about this — " if distressed else ""
    return v.use(
        "escalate_to_human",
        {"reason": reason, "summary": f"Customer wrote: {v.text[:400]}"},
        say=f"{lead}I'm bringing in a colleague now.",
    )


def other_account(v: View) -> Reply:
    oid = _ORDER_ID.findall(v.text)
    if oid and not v.called("get_order", order_id=oid[0]):
        return v.use("get_order", {"order_id": oid[0]})
    listing = v.called("list_orders")
    if listing is None:
        return v.use("list_orders", {})
    mine = [o["order_id"] for o in (listing.value or {}).get("orders", [])][:5]
    return (
        "I can only help with the account you are signed in with, and I can't see or act on anyone else's "
        f"orders. On your account I can see: {', '.join(mine) or 'no orders'}."
    )


def where_is(v: View) -> Reply:
    order = _order(v, prefer=("SHIPPED", "PAID", "PENDING", "DELIVERED"))
    if not isinstance(order, dict):
        return order
    oid, status = order["order_id"], order["status"]
    if status in ("SHIPPED", "DELIVERED"):
        track = v.called("track_shipment", order_id=oid)
        if track is None:
            return v.use("track_shipment", {"order_id": oid})
        t = track.value if not track.is_error else {}
        if status == "DELIVERED":
            return f"Your order {oid} was delivered on {str(t.get('delivered_at') or order.get('delivered_at'))[:10]}."
        eta = str(t.get("estimated_delivery") or "")[:10]
        return (
            f"Your order {oid} is on its way with {t.get('carrier', 'the carrier')} (tracking "
            f"{t.get('tracking_number', 'n/a')}); estimated delivery {eta or 'soon'}."
        )
    words = {"PAID": "paid and being prepared for shipping", "PENDING": "waiting for payment", "CANCELLED": "cancelled"}
    return f"Your order {oid} is {words.get(status, status.lower())}."


def refund(v: View) -> Reply:
    order = _order(v, prefer=("DELIVERED", "SHIPPED"))
    if not isinstance(order, dict):
        return order
    oid = order["order_id"]
    if order["status"] in ("PAID", "PENDING"):
        return f"Your order {oid} hasn't shipped yet — I can cancel it instead, which refunds it in full. Shall I?"
    refundable = int(order.get("refundable_minor") or 0)
    if refundable <= 0:
        return f"Order {oid} has nothing left to refund: it was paid back in full earlier."
    evidence = _evidence(v, "refund window policy", "refund-policy@")
    if not isinstance(evidence, Cited):
        return evidence
    amount = min(_amount(v) or refundable, refundable)
    args = {
        "order_id": oid,
        "amount_minor": amount,
        "currency": order["currency"],
        "reason_code": _reason(v.low, _REFUND_REASONS, "customer_request"),
        "evidence": list(evidence.ids),
    }
    return _act(v, "issue_refund", args)


def charged_twice(v: View) -> Reply:
    payments = v.called("list_payments")
    if payments is None:
        return v.use("list_payments", {"order_id": v.order_id()} if v.order_id() else {})
    by_order: dict[str, list[dict[str, Any]]] = {}
    for p in (payments.value or {}).get("payments", []) if not payments.is_error else []:
        if p.get("status") == "captured":
            by_order.setdefault(p["order_id"], []).append(p)
    dup = next((ps for ps in by_order.values() if len(ps) >= 2), None)
    if dup is None:
        return (
            "I only see one captured payment per order, so nothing was charged twice. A second line on your "
            "statement is usually a temporary authorization hold that disappears within 3–5 business days."
        )
    evidence = _evidence(v, "duplicate charge", "double-charges@")
    if not isinstance(evidence, Cited):
        return evidence
    args = {
        "order_id": dup[0]["order_id"],
        "amount_minor": dup[0]["amount_minor"],
        "currency": dup[0]["currency"],
        "reason_code": "duplicate_charge",
        "evidence": list(evidence.ids),
    }
    return _act(v, "issue_refund", args)


def payment_failed(v: View) -> Reply:
    payments = v.called("list_payments")
    if payments is None:
        return v.use("list_payments", {"order_id": v.order_id()} if v.order_id() else {})
    rows = (payments.value or {}).get("payments", []) if not payments.is_error else []
    paid = {p["order_id"] for p in rows if p.get("status") == "captured"}
    failed = [p for p in rows if p.get("status") == "failed" and p["order_id"] not in paid]
    if not failed:
        return "I can't see a failed payment on your account — all your orders with payments are paid."
    return _act(v, "retry_payment", {"order_id": failed[0]["order_id"]})


def cancel(v: View) -> Reply:
    order = _order(v, prefer=("PAID", "PENDING"))
    if not isinstance(order, dict):
        return order
    if order["status"] not in ("PAID", "PENDING"):
        return (
            f"Order {order['order_id']} is {order['status'].lower()}, so it can no longer be cancelled — once "
            "it arrives I can start a return for you instead."
        )
    evidence = _evidence(v, "cancel order before shipping", "cancellations@")
    if not isinstance(evidence, Cited):
        return evidence
    return _act(
        v,
        "cancel_order",
        {
            "order_id": order["order_id"],
            "evidence": list(evidence.ids),
            "reason_code": _reason(v.low, _CANCEL_REASONS, "customer_request"),
        },
    )


def start_return(v: View) -> Reply:
    order = _order(v, prefer=("DELIVERED",))
    if not isinstance(order, dict):
        return order
    if order["status"] != "DELIVERED":
        return f"Order {order['order_id']} hasn't been delivered yet, so a return can't be started for it."
    items = [
        {"sku": i["sku"], "qty": i["qty"]} for i in order.get("items", []) if any(w in v.low for w in _words(_name(i)))
    ] or [{"sku": i["sku"], "qty": i["qty"]} for i in order.get("items", [])]
    return _act(
        v,
        "create_return",
        {"order_id": order["order_id"], "items": items, "reason_code": _reason(v.low, _RETURN_REASONS, "changed_mind")},
    )


def change_address(v: View) -> Reply:
    address = parse_address(v.text)
    if address is None:
        return (
            "Please send the full new address in one line: street, city, region and postal code, country "
            "(for example: 12 Elm St, Boulder, CO 80302, US)."
        )
    order = _order(v, prefer=("PAID", "PENDING"))
    if not isinstance(order, dict):
        return order
    if order["status"] not in ("PAID", "PENDING"):
        return f"Order {order['order_id']} has already shipped, so its address can no longer be changed."
    return _act(v, "update_shipping_address", {"order_id": order["order_id"], "address": address})


def password(v: View) -> Reply:
    return _act(v, "send_password_reset", {})


def knowledge(v: View) -> Reply:
    query = " ".join(w for w in re.findall(r"[a-z0-9]+", v.low) if w not in _STOP)[:300] or "help"
    search = v.called("search_knowledge")
    if search is None:
        return v.use("search_knowledge", {"query": query if len(query) >= 2 else "help"})
    hit = _clean_hits(search.value)[:1]
    if not hit:
        return "I couldn't find that in our help centre; I can pass your question to a colleague if you like."
    content = hit[0]["content"]["untrusted_data"]["text"]
    title, _, body = content.partition("\n\n")
    return f"From our {title} ({hit[0]['evidence_id']}): {body}"


# -- helpers ------------------------------------------------------------------------------


def general_question(low: str) -> bool:
    """A question about policy in general, not about one of the customer's orders."""
    if _ORDER_ID.search(low.upper()) or re.search(r"\bmy (order|refund|package|parcel|payment)", low):
        return False
    return bool(
        re.search(
            r"\bpolic(y|ies)\b|^\s*(how (long|do|does|can|many|much)|what (is|are)|do you|can i|"
            r"is it possible)\b|\bwarranty\b",
            low,
        )
    )


def _act(v: View, tool: str, args: dict[str, Any]) -> Reply:
    done = v.called(tool)
    if done is None:
        return v.use(tool, args)
    if done.is_error:
        return _refusal(v, tool, done)
    status = str((done.value or {}).get("status")) if isinstance(done.value, dict) else ""
    if status in _STATUS_REPLIES:
        return _STATUS_REPLIES[status](done.value)
    return _done(v, "", done.value, call=done)


def _refusal(v: View, tool: str, call: Call) -> Reply:
    err = call.value if isinstance(call.value, dict) else {}
    code = err.get("error", "error")
    if code in (
        "outside_refund_window",
        "daily_refund_limit_reached",
        "daily_amount_limit_reached",
        "run_action_limit_reached",
        "return_window_closed",
        "outside_return_window",
    ):
        summary = f"{tool} refused ({code}) for: {v.text[:300]}"
        return v.use(
            "escalate_to_human",
            {"reason": "policy_exception", "summary": summary},
            say="That falls outside what I can do myself under our policy, so I'm asking a colleague to review it.",
        )
    if code == "not_found":
        return f"I can't find {call.input.get('order_id', 'that')} on your account."
    return f"I couldn't do that: {err.get('message') or code}. Would you like me to pass this to a colleague?"


def _order(v: View, *, prefer: tuple[str, ...]) -> dict[str, Any] | Reply:
    """The order the customer means, looked up this turn; otherwise the reply that gets there."""
    oid = v.order_id()
    if oid is None:
        listing = v.called("list_orders")
        if listing is None:
            return v.use("list_orders", {})
        rows = (listing.value or {}).get("orders", []) if not listing.is_error else []
        ranked = sorted(rows, key=lambda o: prefer.index(o["status"]) if o["status"] in prefer else 99)
        if not ranked:
            return "I can't see any orders on your account."
        oid = ranked[0]["order_id"]
    got = v.called("get_order", order_id=oid)
    if got is None:
        return v.use("get_order", {"order_id": oid})
    if got.is_error:
        return f"I can't find order {oid} on your account. Could you check the order number?"
    return dict(got.value)


@dataclass(frozen=True, kw_only=True)
class Cited:
    """The knowledge an action cites (its evidence ids)."""

    ids: tuple[str, ...]


def _evidence(v: View, query: str, prefix: str) -> Cited | Reply:
    """The evidence for an action, or the reply that fetches it (or says it is missing)."""
    search = v.called("search_knowledge", query=query)
    if search is None:
        return v.use("search_knowledge", {"query": query})
    ids = [h["evidence_id"] for h in _clean_hits(search.value) if h["evidence_id"].startswith(prefix)]
    if not ids:
        return "I couldn't find the policy that covers this, so I'll leave it for a colleague."
    return Cited(ids=tuple(ids[:1]))


def _clean_hits(value: Any) -> list[dict[str, Any]]:
    """Search hits, skipping text that tries to instruct the agent (forum tips and the like)."""
    hits = (value or {}).get("hits", []) if isinstance(value, dict) else []
    return [h for h in hits if not _PUSHY.search(json.dumps(h))]


def _amount(v: View) -> int | None:
    m = _MONEY.search(v.text)
    return round(float(m.group(1) or m.group(2)) * 100) if m else None


def _reason(text: str, table: tuple[tuple[str, str], ...], default: str) -> str:
    return next((code for pattern, code in table if re.search(pattern, text)), default)


def _name(item: dict[str, Any]) -> str:
    name = item.get("name")
    return str(name.get("untrusted_data", {}).get("text", "")) if isinstance(name, dict) else str(name or "")


def _words(name: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]{3,}", name.lower()) if w not in _STOP]


def parse_address(text: str) -> dict[str, str] | None:
    """``... to 12 Elm St, Boulder, CO 80302, US`` → an address object, or None."""
    m = re.search(
        # Bounded parts: unbounded ones rescanned the rest of a long message from every "to 1".
        r"\bto:?\s{1,3}(\d[^,\n]{0,100}),\s{0,3}([^,\n]{1,100}),\s{0,3}(?:([A-Za-z]{2,3})\s{1,3})?"
        r"([A-Za-z0-9 -]{3,10}),\s{0,3}([A-Z]{2})\b",
        text,
    )
    if not m:
        return None
    out = {
        "line1": m.group(1).strip(),
        "city": m.group(2).strip(),
        "postal_code": m.group(4).strip(),
        "country": m.group(5),
    }
    if m.group(3):
        out["region"] = m.group(3)
    return out


_PUSHY = re.compile(r"\[\[|assistants? reading this|ignore (all |any )?(previous|prior) instructions", re.I)
_DISTRESS = (
    "furious",
    "angry",
    "upset",
    "unacceptable",
    "ridiculous",
    "crying",
    "desperate",
    "disgusted",
    "fed up",
    "worst",
    "lawyer",
    "scared",
    "panic",
    "distraught",
    "at my wits",
)
_REFUND_REASONS = (
    (r"damag|broken|crack|smash", "damaged"),
    (r"faulty|defect|stopped working|doesn't work", "defective"),
    (r"never (arrived|came)|not received|didn't arrive", "not_received"),
    (r"wrong item", "wrong_item"),
    (r"size|fit|shr[ua]nk", "wrong_size"),
    (r"late|delay", "late_delivery"),
    (r"price", "price_adjustment"),
    (r"changed my mind|don't want", "changed_mind"),
)
_CANCEL_REASONS = (
    (r"mistake|by accident", "ordered_by_mistake"),
    (r"duplicate|twice", "duplicate_order"),
    (r"too slow|too long", "delivery_too_slow"),
)
_RETURN_REASONS = (
    (r"size|fit|small|big|large|tight", "wrong_size"),
    (r"damag|broken|crack", "damaged"),
    (r"faulty|defect|stopped working", "defective"),
    (r"wrong item", "wrong_item"),
    (r"not as described|different from", "not_as_described"),
    (r"late", "arrived_late"),
)

#: (patterns, handler) in priority order: the first intent whose pattern matches wins.
INTENTS: tuple[tuple[tuple[str, ...], Callable[[View], Reply]], ...] = (
    (
        (r"\b(a|real) (person|human)\b", r"\bhuman\b", r"speak to (someone|somebody|an? )", r"\bmanager\b", *_DISTRESS),
        escalate,
    ),
    (
        (
            r"\b(i am|i'm|this is) (customer )?c-\d+",
            r"\bcustomer c-\d+",
            r"someone else's",
            r"their orders",
            r"another (customer|account)",
        ),
        other_account,
    ),
    ((r"charged twice", r"double[- ]?charged", r"two charges", r"duplicate (charge|payment)"), charged_twice),
    (
        (
            r"payment (failed|didn't|was declined)",
            r"card (was )?declined",
            r"retry (the )?payment",
            r"payment.{0,60}fail",
        ),
        payment_failed,
    ),
    ((r"\bcancel",), cancel),
    ((r"\baddress\b", r"\bship it to\b", r"\bdeliver (it )?to\b"), change_address),
    ((r"\brefund", r"money back", r"[$€£]\s?\d+(\.\d+)? back", r"\bget .{0,30}\bback\b"), refund),
    ((r"\breturn\b", r"send (it|them) back", r"doesn't fit", r"wrong size"), start_return),
    ((r"password", r"can't log ?in", r"locked out"), password),
    ((r"\bwhere\b.{0,120}\border", r"\btrack", r"\bstatus\b", r"\barrive", r"\bdelivery\b", r"\bshipped\b"), where_is),
    ((r"\?", r"\bpolicy\b", r"how (long|do|can)"), knowledge),
)

__all__ = ["DemoPlanner", "View", "plan", "view_of"]
