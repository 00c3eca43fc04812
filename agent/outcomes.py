"""What a turn hands back to the face that asked: the reply, and what now waits on a person."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

#: ``held``: a person owns the conversation (a hand-off); the agent stored the message and said nothing.
Outcome = Literal["answered", "finished", "escalated", "gave_up", "refused", "asked", "recorded", "held"]


@dataclass(frozen=True, kw_only=True)
class Pending:
    """Something waiting on a person: a confirmation (with the code they may type back) or an approval."""

    kind: Literal["confirmation", "approval"]
    id: str
    summary: str
    #: Confirmations only; rendered by the runtime, never shown to the model.
    code: str | None = None


@dataclass(frozen=True, kw_only=True)
class TurnResult:
    """What a turn gives the face: the reply to deliver and what now waits on a person.

    ``reply`` is ``answer`` (the model's words) followed by ``notice`` (the runtime's own
    rendering, from the exact arguments, of every confirmation this turn asked for). A face
    that shows confirmations as cards may deliver ``answer`` and the cards instead; either
    way it reports delivery (``Runtime.delivered``) so a typed "yes" can bind to it.
    """

    conversation_id: str
    run_id: str
    reply: str
    iterations: int
    input_tokens: int
    output_tokens: int
    pending: tuple[Pending, ...]
    outcome: Outcome
    answer: str = ""
    notice: str = ""
    #: The conversation's last message when this result was made: the answer's identity, so a
    #: face delivers it once however many paths (the worker, crash recovery) hand it over.
    seq: int | None = None

    @property
    def delivery_key(self) -> str:
        """Once-only key of this answer's delivery."""
        return f"{self.conversation_id}:{self.seq if self.seq is not None else self.run_id}"

    @property
    def shown_confirmations(self) -> tuple[str, ...]:
        """The confirmations whose runtime text this result carries."""
        return tuple(p.id for p in self.pending if p.kind == "confirmation")

    def as_dict(self) -> dict[str, Any]:
        """As JSON values (a face keeps the answer owed on its inbound row)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnResult:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["pending"] = tuple(Pending(**p) for p in data.get("pending") or ())
        return cls(**values)


__all__ = ["Outcome", "Pending", "TurnResult"]
