"""The run's own tools, as the ``always`` group sees them: case management
(:class:`~tools.context.CaseDesk`) and run control (:class:`~tools.context.RunControl`)
for one turn. ``finish`` is verified against the run's tool log here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent import gates
from agent.claims import claimed_actions
from agent.turn import Turn
from tools.backend import KnowledgeHit
from tools.context import CaseView, ToolFailure, ToolGroup


@dataclass(frozen=True)
class TurnDesk:
    turn: Turn

    async def get_case(self) -> CaseView:
        t = self.turn
        notes = await t.services.conversations.case_notes(t.conversation.id)
        return CaseView(
            conversation_id=t.conversation.id,
            status=t.conversation.status,
            customer_id=t.principal.customer_id,
            channel=t.conversation.channel,
            notes=tuple(f"[{k}] {txt}" for k, _a, txt in notes[-20:]),
        )

    async def add_note(self, note: str) -> int:
        t = self.turn
        return await t.services.conversations.add_case_note(
            t.conversation.id, author=f"agent:{t.run.id}", kind="note", text=note, audit=[t.event("case.note")]
        )

    async def escalate(self, reason: str, summary: str) -> dict[str, Any]:
        return await gates.escalate(self.turn, reason, summary)


@dataclass(frozen=True)
class TurnControl:
    turn: Turn

    def load_group(self, group: ToolGroup) -> list[str]:
        self.turn.facts.loaded_groups.add(group)
        return self.turn.services.registry.names_for(self.turn.facts.loaded_groups)

    def record_knowledge(self, hits: list[KnowledgeHit]) -> None:
        self.turn.facts.knowledge_ids.update(h.evidence_id for h in hits)
        for h in hits:
            self.turn.notes[h.evidence_id] = {"title": h.title, "excerpt": h.text[:400]}

    def finish(self, resolution: str, action_ids: list[str], sources: list[str]) -> dict[str, Any]:
        t = self.turn
        done = t.executed_all()
        known = {e["action_id"] for e in done if e.get("action_id")} | {e["proposal_id"] for e in done}
        unknown = [a for a in action_ids if a not in known]
        if unknown:
            raise ToolFailure(
                "unverified_action_ids", "No tool in this conversation returned these ids.", unknown_action_ids=unknown
            )
        bad_sources = [s for s in sources if s not in t.facts.knowledge_ids]
        if bad_sources:
            raise ToolFailure(
                "unverified_sources", "search_knowledge did not return these ids.", unknown_sources=bad_sources
            )
        claimed = claimed_actions(resolution, t.services.registry)
        missing = sorted(c for c in claimed if c not in {e["tool"] for e in done if not e.get("replayed")})
        if missing:
            replays = sorted({e["tool"] for e in done if e.get("replayed")} & set(missing))
            if replays:
                raise ToolFailure(
                    "claims_replayed_action",
                    "The resolution says this was done now, but it had already been done earlier "
                    "(the tool result says replayed); say when it was done originally.",
                    claimed=missing,
                    already_done=replays,
                )
            raise ToolFailure(
                "claims_unverified_action",
                "The resolution claims an action no tool carried out in this conversation.",
                claimed=missing,
            )
        t.finished = {"resolution": resolution, "action_ids": action_ids, "sources": sources}
        return {"status": "finished"}
