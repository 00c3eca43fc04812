"""What signoff holds on a customer, exported or redacted (the shop's compliance requests).

``export`` lists the customer's conversations with their messages and case notes, identity
links and assist-thread bindings. ``redact`` anonymises them in one transaction: message
contents and case notes become ``[redacted]``, proposals' and the ledger's arguments and
results are dropped, the conversations lose their customer id, and the identity links, thread
bindings and sent-mail outbox of those conversations (and the shop messages sent to the
customer outside one) are deleted. The audit chain is
append-only and carries personal data only as hashes; it is left as it is and the redaction is
appended to it (``compliance.redact``) by the caller."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Connection, Table, delete, or_, select, update

from storage.db import Database
from storage.models import (
    ApprovalRow,
    CaseNoteRow,
    ConversationRow,
    IdentityRow,
    MessageRow,
    ProposalRow,
    SentMailRow,
    ThreadBindingRow,
    ToolExecutionRow,
)

_CONV = cast(Table, ConversationRow.__table__)
_MSG = cast(Table, MessageRow.__table__)
_NOTE = cast(Table, CaseNoteRow.__table__)
_PROP = cast(Table, ProposalRow.__table__)
_LEDGER = cast(Table, ToolExecutionRow.__table__)
_APPR = cast(Table, ApprovalRow.__table__)
_IDENT = cast(Table, IdentityRow.__table__)
_BIND = cast(Table, ThreadBindingRow.__table__)
_MAIL = cast(Table, SentMailRow.__table__)
REDACTED = "[redacted]"
#: What a redacted conversation's customer id becomes.
REDACTED_CUSTOMER = "redacted"


def _stamp(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


class CustomerData:
    """Export and redaction of one customer's (or every customer's) data."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def export(self, customer_ids: Sequence[str]) -> dict[str, Any]:
        """Everything signoff holds on the customer known by any of ``customer_ids``."""
        ids = sorted(set(customer_ids))

        def read(conn: Connection) -> dict[str, Any]:
            convs = conn.execute(select(_CONV).where(_CONV.c.customer_id.in_(ids)).order_by(_CONV.c.created_at)).all()
            conv_ids = [c.id for c in convs]
            msgs = conn.execute(select(_MSG).where(_MSG.c.conversation_id.in_(conv_ids)).order_by(_MSG.c.id)).all()
            notes = conn.execute(select(_NOTE).where(_NOTE.c.conversation_id.in_(conv_ids))).all()
            links = conn.execute(select(_IDENT).where(_IDENT.c.customer_id.in_(ids))).all()
            binds = conn.execute(select(_BIND).where(_BIND.c.customer_id.in_(ids))).all()
            return {
                "customer_ids": ids,
                "conversations": [
                    {
                        "id": c.id,
                        "channel": c.channel,
                        "status": c.status,
                        "created_at": _stamp(c.created_at),
                        "messages": [
                            {"role": m.role, "content": m.content, "at": _stamp(m.created_at)}
                            for m in msgs
                            if m.conversation_id == c.id
                        ],
                        "case_notes": [n.text for n in notes if n.conversation_id == c.id],
                    }
                    for c in convs
                ],
                "identity_links": [{"channel": i.channel, "external_id": i.external_id} for i in links],
                "thread_bindings": [{"ref": b.ref, "staff_id": b.staff_id} for b in binds],
            }

        return await self._db.read(read)

    async def redact(self, customer_ids: Sequence[str] | None) -> dict[str, int]:
        """Anonymise the data of ``customer_ids`` (``None``: every customer, a shop's redaction)."""
        ids = sorted(set(customer_ids or ()))

        def write(conn: Connection, _ctx: object) -> dict[str, int]:
            who = _CONV.c.customer_id.is_not(None) if customer_ids is None else _CONV.c.customer_id.in_(ids)
            conv_ids = [
                r.id for r in conn.execute(select(_CONV.c.id).where(who, _CONV.c.customer_id != REDACTED_CUSTOMER))
            ]
            redacted_block = [{"type": "text", "text": REDACTED}]
            counts = {"conversations": len(conv_ids)}
            counts["messages"] = conn.execute(
                update(_MSG).where(_MSG.c.conversation_id.in_(conv_ids)).values(content=redacted_block)
            ).rowcount
            conn.execute(update(_NOTE).where(_NOTE.c.conversation_id.in_(conv_ids)).values(text=REDACTED))
            props = conn.execute(
                update(_PROP).where(_PROP.c.conversation_id.in_(conv_ids)).values(arguments={}, result=None)
            )
            counts["proposals"] = props.rowcount
            prop_ids = select(_PROP.c.id).where(_PROP.c.conversation_id.in_(conv_ids))
            conn.execute(update(_LEDGER).where(_LEDGER.c.proposal_id.in_(prop_ids)).values(arguments={}, result=None))
            conn.execute(
                update(_APPR)
                .where(_APPR.c.conversation_id.in_(conv_ids))
                .values(customer_id=REDACTED_CUSTOMER, arguments={})
            )
            # The mail of those conversations, and the messages sent to the customer outside one
            # (the Shopify backend's ``send_message``, recorded under the customer's principal).
            to_them = (
                _MAIL.c.principal.like("customer:%")
                if customer_ids is None
                else _MAIL.c.principal.in_([f"customer:{i}" for i in ids])
            )
            mail = delete(_MAIL).where(or_(_MAIL.c.conversation_id.in_(conv_ids), to_them))
            counts["outbox"] = conn.execute(mail).rowcount
            conn.execute(update(_CONV).where(_CONV.c.id.in_(conv_ids)).values(customer_id=REDACTED_CUSTOMER, meta={}))
            link_who = _IDENT.c.customer_id.is_not(None) if customer_ids is None else _IDENT.c.customer_id.in_(ids)
            counts["links"] = conn.execute(delete(_IDENT).where(link_who)).rowcount
            bind_who = _BIND.c.customer_id.is_not(None) if customer_ids is None else _BIND.c.customer_id.in_(ids)
            counts["thread_bindings"] = conn.execute(delete(_BIND).where(bind_who)).rowcount
            return counts

        return await self._db.write(write)
