"""The worker side of the Slack face: what an accepted message, command or visit leads to.

Each step is resumable. A message's turn is stored under the message's key (a retry
never stores it twice), its result is kept on the inbound row before it is posted,
and the post itself happens once per answer (``replies.deliver``). Bindings, links
and refusals are the face's own; every action goes through the runtime.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from datetime import timedelta
from typing import Any

from agent.errors import DecisionError, LimitExceeded
from agent.outcomes import TurnResult
from bot.email.codes import send_code
from bot.slack import blocks, clicks, present, wording
from bot.slack import handoff as handoffs
from bot.slack.face import CHANNEL, Person, SlackFace, thread_ref
from bot.slack.mrkdwn import escape, one_line
from bot.slack.replies import Where, deliver, plain, post_once
from bot.slack.sender import SlackSendError
from bot.slack.view_models import AssistThread
from storage.identities import CodeCaps
from storage.inbox import Inbound
from tools.backend import Customer

log = logging.getLogger(__name__)

#: A command is short (an address is at most 254 characters): longer text is never parsed as one.
MAX_COMMAND = 300
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
#: Codes avoid characters people confuse (0/O, 1/I).
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
LINK_CODE_TTL_S = 15 * 60
#: Code emails: at most 3 to one address and 5 asked for by one Slack user per hour.
LINK_CODE_CAPS = CodeCaps(per_address=3, per_requester=5, window=timedelta(hours=1))
SUGGESTED_PROMPTS = (
    {"title": "Where is my order?", "message": "Where is my order?"},
    {"title": "Start a return", "message": "I'd like to return an item."},
    {"title": "Refund policy", "message": "What is your refund policy?"},
)


async def handle(face: SlackFace, item: Inbound) -> None:
    """One accepted Slack delivery (the worker's ``inbound`` job for this face), answered as
    the bot of the workspace it came from."""
    face = await face.for_team(item.payload.get("team"))
    kind = item.payload.get("kind")
    if kind == "message":
        await on_message(face, item)
    elif kind == "click" and item.payload.get("action_id") in handoffs.CLICKS:
        await handoffs.on_click(face, item)
    elif kind == "click":
        await clicks.on_click(face, item)
    elif kind == "reject":
        await clicks.on_reject(face, item)
    elif kind == "command":
        await on_command(face, item)
    elif kind in ("home", "welcome"):
        await on_visit(face, item)
    await face.port.item(item).delivered()


# -- commands (string operations only: a message is untrusted and up to 40,000 characters) ------
def _words(text: str) -> list[str] | None:
    """The words of a short message; ``None`` for a long one (never a command)."""
    return text.split() if len(text) <= MAX_COMMAND else None


def assist_command(text: str) -> str | None:
    """``assist C-7`` → ``"C-7"`` (upper-cased); anything else → ``None``."""
    words = _words(text)
    if not words or len(words) != 2 or words[0].lower() != "assist":
        return None
    account = words[1]
    if len(account) > 64 or not account[0].isalnum() or not set(account) <= _ID_CHARS:
        return None
    return account.upper()


def link_command(text: str) -> str | None:
    """``link maya@example.com`` → the address, lower-cased; anything else → ``None``."""
    words = _words(text)
    if not words or len(words) != 2 or words[0].lower() != "link":
        return None
    address = words[1].lower()
    local, at, domain = address.rpartition("@")
    name, dot, tld = domain.rpartition(".")
    if not (local and at and name and dot and tld) or len(address) > 254:
        return None
    return address


def code_reply(text: str) -> str | None:
    """A message that is only a six-character code → the code; anything else → ``None``."""
    code = text.strip() if len(text) <= MAX_COMMAND else ""
    return code if len(code) == 6 and code.isascii() and code.isalnum() else None


# -- messages ------------------------------------------------------------------------------
async def on_message(face: SlackFace, item: Inbound) -> None:
    p = item.payload
    person = await face.person(user=p["user"], team=p["actor_team"], external=bool(p.get("ext_shared")))
    where = Where(
        channel=p["channel"], thread_ts=p["thread_ts"], user=p["user"], team=p["actor_team"], private=private(person, p)
    )
    if item.status == "answered" and item.result is not None:
        await deliver(face, where, result_from(item.result), since=item.created_at)
        return
    if await handoffs.on_thread_message(face, item):
        return  # a person's reply (or note) in a hand-off's staff thread
    text = str(p.get("text") or "")
    ref = thread_ref(p["team"], p["channel"], p["thread_ts"])
    if (account := assist_command(text)) is not None:
        await assist(face, item, person, where, account)
        return
    binding = await face.port.binding(ref)
    if binding is not None and not person.is_staff:
        return  # other people's messages in an assist thread are not for the agent
    if not person.is_staff and person.kind == "stranger" and await link_step(face, item, person, where, text):
        return
    principal = person.principal(binding.customer_id if binding is not None and person.is_staff else None)
    await _status(face, where, on=True)
    try:
        result = await face.port.take_message(
            principal=principal,
            channel=CHANNEL,
            message=text,
            external_ref=f"{ref}:{principal.key}:{principal.customer_id or '-'}",
            deliver_later=True,
            message_key=f"inbound:{item.id}",
            meta={
                "slack": {
                    "user": p["user"],
                    "team": p["actor_team"],
                    "external": person.external,
                    "private": where.private,
                }
            },
        )
    except LimitExceeded:
        # A per-principal limit: nothing was stored for this message; say so once, do not retry.
        await post_once(
            face, f"slack:inbound:{item.id}", where.channel, plain(face, wording.LIMIT_REACHED), where.thread_ts
        )
        await _status(face, where, on=False)
        return
    if result is None:
        return  # a live process is answering this message; it delivers
    if result.outcome == "held":
        await _status(face, where, on=False)
        return  # a person owns the conversation: the message went to their thread
    if person.kind == "stranger" and not person.is_staff:
        result = dataclasses.replace(result, reply=f"{result.reply}\n\n{wording.LINK_PROMPT}", answer=_hint(result))
    await face.port.item(item).answered(result_dict(result))
    await deliver(face, where, result, since=item.created_at)
    await _status(face, where, on=False)


def private(person: Person, payload: dict[str, Any]) -> bool:
    """Whether answers to ``person`` here carry account data another organisation could read:
    a customer (linked or on file) in a shared channel, or from another organisation, anywhere
    but a direct message."""
    shared = bool(payload.get("ext_shared")) or person.external
    return person.kind == "customer" and shared and not str(payload.get("channel") or "").startswith("D")


def _hint(result: TurnResult) -> str:
    return f"{result.answer}\n\n{wording.LINK_PROMPT}" if result.answer else wording.LINK_PROMPT


async def _status(face: SlackFace, where: Where, *, on: bool) -> None:
    """The "is working on it…" line while a turn runs (best effort: not every thread has it)."""
    try:
        await face.sender.set_status(
            where.channel,
            where.thread_ts,
            wording.STATUS_WORKING if on else "",
            wording.LOADING_MESSAGES if on else None,
        )
    except SlackSendError as exc:
        log.debug("slack status not set: %s", exc.error)


async def assist(face: SlackFace, item: Inbound, person: Person, where: Where, customer_id: str) -> None:
    """``assist C-7``: bind this thread to the account (staff only), audited and said in the thread."""
    key = f"slack:inbound:{item.id}"
    if not person.is_staff:
        await post_once(face, key, where.channel, plain(face, wording.ASSIST_STAFF_ONLY), where.thread_ts)
        return
    customer = await face.backend.get_customer(customer_id)
    if customer is None:
        await post_once(face, key, where.channel, plain(face, wording.ASSIST_UNKNOWN), where.thread_ts)
        return
    ref = thread_ref(item.payload["team"], where.channel, where.thread_ts)
    await face.port.bind(ref, customer_id=customer.id, staff_id=str(person.id))
    await face.port.face_event(
        "slack.assist_bound",
        {"customer_id": customer.id, "thread": ref, "slack_user": person.user, "slack_team": person.team},
        principal=person.principal().key,
    )
    name = escape(one_line(f"{customer.name} ({customer.id})"))
    await post_once(face, key, where.channel, plain(face, wording.ASSIST_BOUND.format(customer=name)), where.thread_ts)


async def link_step(face: SlackFace, item: Inbound, person: Person, where: Where, text: str) -> bool:
    """``link <email>`` and the code that follows, for a Slack user not on file. True when handled.

    The answer to ``link`` is the same whether or not the address is on file; the code goes
    only to the address on file; code requests are capped per address and per requester
    (:data:`LINK_CODE_CAPS`); attempts are limited over a window (a new code gives no more)
    and codes expire."""
    links = face.port.links
    key = f"slack:inbound:{item.id}"
    external_id = person.slack_key
    if (address := link_command(text)) is not None:
        # Capped before the look-up: the answer to a capped request never depends on the address.
        if not await links.request(CHANNEL, external_id, address, LINK_CODE_CAPS):
            await post_once(face, key, where.channel, plain(face, wording.LINK_CODE_LIMIT), where.thread_ts)
            return True
        customer = await face.backend.find_customer_by_email(address)
        if customer is not None:
            code = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(6))
            await links.start(CHANNEL, external_id, customer_id=customer.id, code=code, ttl_s=LINK_CODE_TTL_S)
            await _send_code(face, customer, code, item.id)
        await post_once(face, key, where.channel, plain(face, wording.LINK_CODE_SENT), where.thread_ts)
        return True
    if (typed := code_reply(text)) is not None and await links.pending(CHANNEL, external_id):
        attempt = await links.attempt(CHANNEL, external_id, typed)
        if attempt.outcome == "linked":
            await face.port.face_event(
                "slack.user_linked",
                {"slack_user": person.user, "slack_team": person.team, "customer_id": attempt.customer_id},
                principal=f"customer:{attempt.customer_id}",
            )
            say = wording.LINK_DONE
        else:
            say = wording.LINK_TOO_MANY if attempt.outcome == "locked" else wording.LINK_BAD_CODE
        await post_once(face, key, where.channel, plain(face, say), where.thread_ts)
        return True
    return False


async def _send_code(face: SlackFace, customer: Customer, code: str, inbound_id: str) -> None:
    """The code to the address on file only: over SMTP when it is configured, else into the
    shop's outbox (the sandbox's)."""
    body = (
        f"Your signoff link code is {code}. Write it in Slack to link your Slack account to your "
        "customer account. It expires in 15 minutes. If you did not ask for it, ignore this message."
    )
    await send_code(
        face.mailer,
        face.backend,
        customer,
        subject=wording.LINK_CODE_SUBJECT,
        body=body,
        template="slack_link_code",
        key=f"slack-link:{inbound_id}",
    )


# -- the slash command ------------------------------------------------------------------------
async def on_command(face: SlackFace, item: Inbound) -> None:
    """``/signoff assist C-7`` opens an assist thread; ``/signoff queue`` shows the pending approvals."""
    p = item.payload
    person = await face.person(user=p["user"], team=p["actor_team"], external=p["actor_team"] != p["team"])
    words = str(p.get("text") or "").split()
    channel, user = p["channel"], p["user"]
    if words[:1] == ["assist"] and len(words) == 2:
        if not person.is_staff:
            await _ephemeral(face, channel, user, wording.ASSIST_STAFF_ONLY)
            return
        customer = await face.backend.get_customer(words[1].upper())
        if customer is None:
            await _ephemeral(face, channel, user, wording.ASSIST_UNKNOWN)
            return
        opener = f"Assist thread for {escape(one_line(customer.name))} ({customer.id}), opened by <@{user}>."
        ts = await post_once(face, f"slack:inbound:{item.id}:open", channel, plain(face, opener))
        if ts is not None:
            where = Where(channel=channel, thread_ts=ts, user=user, team=p["actor_team"])
            await assist(face, item, person, where, customer.id)
        return
    if words[:1] == ["queue"]:
        if person.kind != "supervisor":
            await _ephemeral(face, channel, user, wording.ONLY_SUPERVISOR)
            return
        queue, people = await present.approval_views(face, await face.port.pending_approvals(limit=20))
        view = blocks.home_view(queue=queue, directory=people)
        await face.sender.ephemeral(channel, user, wording.HOME_QUEUE_HEADER, view["blocks"][:50])
        return
    await _ephemeral(face, channel, user, "Try `/signoff assist C-7` or `/signoff queue`.")


async def _ephemeral(face: SlackFace, channel: str, user: str, text: str) -> None:
    try:
        await face.sender.ephemeral(channel, user, text)
    except SlackSendError as exc:
        log.info("slack ephemeral not sent: %s", exc.error)


# -- App Home and the Messages tab --------------------------------------------------------------
async def on_visit(face: SlackFace, item: Inbound) -> None:
    """App Home: a supervisor's queue, a rep's assist threads; the Messages tab: suggested prompts."""
    p = item.payload
    if p["kind"] == "welcome" or p.get("tab") == "messages":
        channel = p.get("channel")
        if channel:
            try:
                await face.sender.call(
                    "assistant.threads.setSuggestedPrompts",
                    lambda: face.client.assistant_threads_setSuggestedPrompts(
                        channel_id=channel, prompts=list(SUGGESTED_PROMPTS), thread_ts=p.get("thread_ts") or None
                    ),
                )
            except SlackSendError as exc:
                log.info("suggested prompts not set: %s", exc.error)
        return
    await publish_home(face, p["user"], p.get("actor_team") or p["team"])


async def publish_home(face: SlackFace, user: str, team: str) -> None:
    person = await face.person(user=user, team=team, external=False)
    if not person.is_staff:
        view = blocks.home_view()
    else:
        queue = await face.port.pending_approvals(limit=20) if person.kind == "supervisor" else None
        mine = await face.port.bindings_of(str(person.id))
        threads = []
        for b in mine:
            parts = b.ref.split(":")
            if len(parts) == 4:
                threads.append(AssistThread(channel=parts[2], thread_ts=parts[3], customer_id=b.customer_id))
        views, people = await present.approval_views(face, queue or [])
        view = blocks.home_view(queue=views if queue is not None else None, threads=threads, directory=people)
    await face.sender.publish_home(user, view)
    if person.kind == "supervisor":
        face.home_viewers[user] = team


# -- stored results ------------------------------------------------------------------------------
def result_dict(result: TurnResult) -> dict[str, Any]:
    return result.as_dict()


def result_from(data: dict[str, Any]) -> TurnResult:
    return TurnResult.from_dict(data)


__all__ = ["DecisionError", "handle", "publish_home", "result_dict", "result_from"]
