"""A person's reply to an email customer during a hand-off (``agent/handoff_relay.py``).

It goes out like every reply of the email face: over the one SMTP client, from the shop's
address (``SIGNOFF_EMAIL_FROM``), to the address on file (S3), in the conversation's mail
thread (``In-Reply-To`` the newest message of it, ``References`` the thread), once per key
(``Deliveries``). Its Message-ID is recorded first, so the customer's answer to it joins
the same conversation — and reaches the person's thread.
"""

from __future__ import annotations

import logging
from typing import Any

from agent.face_port import FacePort
from agent.handoff_relay import Deliver
from bot.email import wording as say
from bot.email.smtp import Mailer, OutgoingEmail, new_message_id, reply_subject, valid_message_id
from bot.email.turns import Busy
from storage.mailbox import SentMail
from storage.records import Conversation
from tools.backend import IdentityDirectory

log = logging.getLogger(__name__)


def email_delivery(
    port: FacePort, backend: IdentityDirectory, mailer: Mailer, from_address: str, sent: SentMail
) -> Deliver:
    """The email channel's delivery of relayed messages (``Relay.deliver_on("email", …)``)."""

    async def deliver(conversation: Conversation, text: str, name: str, key: str) -> None:
        customer = await backend.get_customer(conversation.customer_id) if conversation.customer_id else None
        if customer is None:
            log.warning("hand-off reply in %s not emailed: no customer on file", conversation.id)
            return
        fresh = await port.conversation(conversation.id) or conversation
        thread = dict(fresh.meta.get("email") or {})
        ids = [i for i in thread.get("message_ids", []) if isinstance(i, str) and valid_message_id(i)]
        message_id = new_message_id(conversation.id, from_address)

        async def send() -> dict[str, Any]:
            # Recorded first: the customer's answer must find its thread even if we die after SMTP.
            await sent.record(
                message_id, conversation_id=fresh.id, principal=f"{fresh.principal_kind}:{fresh.principal_id}"
            )
            await mailer.send(
                OutgoingEmail(
                    to=customer.email,
                    from_address=from_address,
                    subject=reply_subject(str(thread.get("subject", ""))),
                    body=text + say.HANDOFF_SIGNATURE.format(name=" ".join(name.split())[:100]),
                    message_id=message_id,
                    in_reply_to=ids[-1] if ids else None,
                    references=tuple(ids[-20:]),
                )
            )
            return {"message_id": message_id}

        done = await port.once(f"email:{key}"[:200], send)
        if done.state == "busy":
            raise Busy(f"another process is sending {key}")
        if done.sent_now:
            await port.set_face_meta(fresh.id, "email", {**thread, "message_ids": [*ids, message_id][-100:]})

    return deliver
