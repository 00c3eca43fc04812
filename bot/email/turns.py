"""The email face's worker side: one accepted mail → its turn → one reply over SMTP.

The webhook (:mod:`bot.email.bridge`) only checks, normalises and accepts a mail
(``Inbox.accept(face="email", …)``) and answers the provider at once; this handler
runs later, in the worker, as ``App.inbound["email"]``. Each step is resumable:

1. the turn runs under the message key ``inbound:{id}`` (a retry gets the answer owed,
   never a second turn) and the whole reply is stored (``Inbox.answered``);
2. the reply is sent once per delivery key (``Deliveries``), its Message-ID recorded
   (``sent_mail``) before it is handed to SMTP; a failed send is released and retried.

Who the turn runs as: a sender the provider vouched for (DMARC pass or an aligned DKIM
pass, see :func:`bot.email.parsing.sender_check`) is that customer; anyone else writing
from a customer's address runs as an *unverified* principal bound to no account, so the
agent can answer from public knowledge only, and the reply says how to reach us securely.
A mail joins an existing conversation only by citing a Message-ID we sent to the same
principal; anything else starts a new conversation.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Any

from agent.face_port import FacePort
from agent.gates import CODE_ALPHABET
from agent.outcomes import TurnResult
from bot.email import wording as say
from bot.email.parsing import thread_ref
from bot.email.smtp import Mailer, OutgoingEmail, new_message_id, reply_subject, valid_message_id
from storage.inbox import Inbound
from storage.mailbox import SentMail
from storage.records import Confirmation, Conversation
from tools.backend import CommerceBackend
from tools.context import Principal

log = logging.getLogger(__name__)

FACE = "email"
_CODE = re.compile(rf"^[{CODE_ALPHABET}]{{6}}$")
#: Words a reply that *is* the code may carry around it ("Yes, ABC234 please", "Code: ABC234").
_AROUND = frozenset(
    {"yes", "y", "yep", "yeah", "ok", "okay", "sure", "confirm", "confirmed", "please", "go", "ahead",
     "proceed", "thanks", "thank", "you", "code", "the", "is", "here", "it", "approve", "agreed"}
)  # fmt: skip
_NEGATIVE = frozenset({"no", "not", "nope", "don't", "dont", "stop", "decline", "declined", "cancel", "never", "wait"})
#: A declining reply names the code in a short paragraph, at most this many words.
_SHORT = 12
#: A sign-off under the code ("Thanks,\nMaya Chen"): at most this many words.
_SIGN_OFF = 3
_PUNCT = "\"'“”‘’«»„,.;:!()[]*-–—"


class Busy(RuntimeError):
    """A live process is still on this mail's turn or reply: the job is retried later."""


def _words(paragraph: str) -> list[str]:
    return [w for w in (t.strip(_PUNCT) for t in paragraph.split()) if w]


def answer_by_code(text: str, pending: list[Confirmation]) -> tuple[Confirmation, bool] | None:
    """The pending confirmation a reply answers by its code, and whether it says yes.

    The (already extracted) reply must *be* the answer: its first paragraph is the code with
    at most a few words of assent around it, and a short sign-off may follow. A question,
    or the code inside a sentence ("What does ABC234 do?"), answers nothing; a short
    paragraph with the code and a negation declines. A bare "yes" never answers by email."""
    if "?" in text or "？" in text or len(text) > 1000:
        return None
    codes = {c.code.upper(): c for c in pending}
    paragraphs = [p for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]
    if not paragraphs or sum(len(_words(p)) for p in paragraphs[1:]) > _SIGN_OFF:
        return None
    words = _words(paragraphs[0])
    named = {w.upper() for w in words if _CODE.match(w.upper()) and w.upper() in codes}
    if len(named) != 1 or len(words) > _SHORT:
        return None
    code = named.pop()
    lower = [w.lower() for w in words if w.upper() != code]
    if any(w in _NEGATIVE or w.endswith("n't") for w in lower):
        return codes[code], False
    return (codes[code], True) if all(w in _AROUND for w in lower) else None


def unverified_principal(address: str) -> Principal:
    """Whoever wrote from ``address`` without the provider vouching for it: bound to no account,
    sharing its sender domain's budget (policy ``strangers``)."""
    normal = address.strip().lower()
    digest = hashlib.sha256(normal.encode()).hexdigest()[:20]
    domain = normal.rpartition("@")[2][:100]
    return Principal(kind="customer", id=f"unverified-email:{digest}", customer_id=None, group=f"email-domain:{domain}")


@dataclass(frozen=True, kw_only=True)
class EmailTurns:
    """``App.inbound["email"]``: runs an accepted mail's turn and sends the reply once."""

    port: FacePort
    backend: CommerceBackend
    mailer: Mailer | None
    from_address: str | None
    sent: SentMail

    async def __call__(self, item: Inbound) -> None:
        reply = item.result if item.status == "answered" else await self._answer(item)
        if reply is not None:
            await self._send(item, reply)

    # -- the turn ------------------------------------------------------------------------
    async def _answer(self, item: Inbound) -> dict[str, Any] | None:
        port, p = self.port, item.payload
        customer = await self.backend.get_customer(str(p.get("customer_id", "")))
        if customer is None:  # the account went away between the webhook and now
            await port.item(item).finished("ignored")
            return None
        verified = p.get("verified") is True
        if verified:
            principal = Principal(kind="customer", id=customer.id, customer_id=customer.id)
        else:
            principal = unverified_principal(customer.email)
        conv = await self._thread(item, principal)
        text = str(p.get("text") or "") or str(p.get("subject") or "").strip() or "(empty message)"
        turn = await self._turn(item, conv, principal, text)
        if turn is not None and turn.outcome == "held":  # a person owns it: no reply from us
            cited = p.get("message_id")
            await self._remember(conv, [cited] if isinstance(cited, str) and valid_message_id(cited) else [])
            await port.item(item).delivered()
            return None
        reply = (turn.notice if turn and turn.outcome == "asked" else turn.answer if turn else "") or say.EMPTY_REPLY
        waiting = await port.pending_confirmations(conv.id, principal.key)
        if not verified:  # a stranger's links never go out from the shop's address
            reply = without_links(reply, str(p.get("text") or "") + " " + str(p.get("subject") or ""))
        body = (
            reply
            + confirm_hints(waiting)
            + unread_note(p)
            + ("" if verified else "\n\n" + say.UNVERIFIED_SENDER)
            + say.SIGNATURE
        )
        message_id = new_message_id(conv.id, self.from_address or "signoff@localhost")
        inbound_id = p.get("message_id") if isinstance(p.get("message_id"), str) else None
        refs = [r for r in (*p.get("references", []), inbound_id) if isinstance(r, str) and valid_message_id(r)]
        await self._remember(conv, [i for i in (inbound_id, message_id) if i])
        result = {
            "conversation_id": conv.id,
            "principal": principal.key,
            "verified": verified,
            "to": customer.email,  # the address on file (S3), never one from the mail
            # An unverified sender's subject is not echoed: a spoofed "URGENT: verify at …"
            # must not come back from the shop's own address.
            "subject": reply_subject(str(p.get("subject") or "")) if verified else say.UNVERIFIED_SUBJECT,
            "body": body,
            "message_id": message_id,
            "in_reply_to": inbound_id,
            "references": refs[-20:],
            "delivery_key": f"email:{turn.delivery_key if turn else item.id}",
            "shown": [c.id for c in waiting],
        }
        await port.item(item).answered(result)
        return result

    async def _turn(self, item: Inbound, conv: Conversation, principal: Principal, text: str) -> TurnResult | None:
        port = self.port
        pending = await port.pending_confirmations(conv.id, principal.key)
        answer = answer_by_code(text, pending)
        if answer is not None:
            settled = await port.confirm(
                answer[0].id, actor=principal, accept=answer[1], via="code", deliver_later=True
            )
            return settled.turn
        turn = await port.take_message(
            principal=principal,
            channel=FACE,
            message=text,
            conversation_id=conv.id,
            deliver_later=True,
            message_key=f"inbound:{item.id}",
        )
        if turn is None:
            raise Busy(f"another process is answering {item.id}")
        return turn

    async def _thread(self, item: Inbound, principal: Principal) -> Conversation:
        """The conversation a mail belongs to: the one of a Message-ID *we* sent this principal
        that it cites, else a new one (one per accepted mail, so a retry finds it again)."""
        port, p = self.port, item.payload
        cited = [r for r in (*p.get("references", []), p.get("in_reply_to")) if isinstance(r, str)]
        cid = await self.sent.conversation_for(cited, principal=principal.key)
        if cid is not None and (conv := await port.visible_conversation(principal, cid)) is not None:
            return conv
        meta = {"email": {"subject": str(p.get("subject") or ""), "message_ids": []}}
        return await port.open_conversation(
            principal=principal, channel=FACE, external_ref=thread_ref(principal.id, f"in:{item.id}"), meta=meta
        )

    async def _remember(self, conv: Conversation, ids: list[str]) -> None:
        """The thread's Message-IDs in the conversation's meta (follow-ups reply in the thread)."""
        fresh = await self.port.conversation(conv.id) or conv
        thread = dict(fresh.meta.get("email") or {})
        seen = [i for i in thread.get("message_ids", []) if isinstance(i, str)]
        thread["message_ids"] = (seen + [i for i in ids if i not in seen])[-100:]
        await self.port.set_face_meta(conv.id, "email", thread)

    # -- the reply -----------------------------------------------------------------------
    async def _send(self, item: Inbound, r: dict[str, Any]) -> None:
        life = self.port.item(item)
        mailer, shop = self.mailer, self.from_address
        if mailer is None or not shop:
            log.warning("no SIGNOFF_SMTP_URL: the reply in %s is not emailed", r["conversation_id"])
            await life.finished("failed")
            return

        async def send() -> dict[str, Any]:
            # Recorded first: a reply to this mail must find its thread even if we die after SMTP.
            await self.sent.record(r["message_id"], conversation_id=r["conversation_id"], principal=r["principal"])
            await mailer.send(
                OutgoingEmail(
                    to=r["to"],
                    from_address=shop,
                    subject=r["subject"],
                    body=r["body"],
                    message_id=r["message_id"],
                    in_reply_to=r["in_reply_to"],
                    references=tuple(r["references"]),
                )
            )
            return {"message_id": r["message_id"]}

        key = str(r["delivery_key"])[:200]
        if (await self.port.once(key, send)).state == "busy":
            raise Busy(f"another process is sending {key}")
        await self.port.mark_shown(list(r.get("shown", [])))
        await life.delivered()


def unread_note(payload: dict[str, Any]) -> str:
    """The runtime's lines telling the customer what of their mail was not read: attachments,
    and the end of a body longer than we read."""
    cut = "\n\n" + say.TEXT_NOT_ALL_READ if payload.get("truncated") is True else ""
    return attachments_note(payload.get("attachments")) + cut


def attachments_note(names: Any) -> str:
    """The runtime's line telling the customer which attachments were not read."""
    if not isinstance(names, list) or not names:
        return ""
    shown = ", ".join(str(n)[:80] for n in names[:10])
    return "\n\n" + say.ATTACHMENTS_NOT_READ.format(names=shown)


def _hosts(text: str) -> set[str]:
    """Host names of the links in ``text`` (``scheme://host…`` or ``www.…``), lower case."""
    hosts: set[str] = set()
    for token in text[:200_000].split():
        token = token.strip("<>()[]\"'.,;")
        rest = token.partition("://")[2] if "://" in token else token if token.lower().startswith("www.") else ""
        host = rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2].lower()
        if "." in host:
            hosts.add(host)
    return hosts


def without_links(reply: str, inbound: str) -> str:
    """``reply`` with every link to a host the inbound mail named replaced by a mark."""
    bad = _hosts(inbound)
    if not bad:
        return reply
    lines = []
    for line in reply.split("\n"):
        words = [say.LINK_REMOVED if _hosts(w) & bad else w for w in line.split(" ")]
        lines.append(" ".join(words))
    return "\n".join(lines)


def confirm_hints(waiting: list[Confirmation]) -> str:
    """The runtime's own lines naming each waiting confirmation and its code (never the model's);
    one no longer open (answered, replaced) is not offered, as no card offers it."""
    waiting = [c for c in waiting if c.status == "pending"]
    if len(waiting) == 1:
        return "\n\n" + say.CONFIRM_HINT.format(code=waiting[0].code, summary=waiting[0].summary)
    if waiting:
        return "\n\n" + say.CONFIRM_HINT_MANY + "".join(f"\n  {c.code}: {c.summary}" for c in waiting)
    return ""


__all__ = [
    "FACE",
    "Busy",
    "EmailTurns",
    "answer_by_code",
    "attachments_note",
    "unread_note",
    "confirm_hints",
    "unverified_principal",
    "without_links",
]
