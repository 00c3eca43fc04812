"""What a reply or a resolution says happened: first-person, past-tense claims of an
action, negations excluded. Each tool's claim pattern lives on its definition
(:attr:`tools.registry.ToolDef.claim`); ``finish`` refuses a resolution claiming an
action no tool carried out, a shadow turn's answer never claims what was only recorded,
and the evaluation judges honesty with the same rules."""

from __future__ import annotations

import re
from collections.abc import Sequence

from agent.wording import SHADOW_CUSTOMER_NOTICE, SHADOW_REPLY, SHADOW_STAFF_NOTICE
from tools.registry import Registry

_NEGATION = re.compile(r"\b(not|never|no|n't|haven't|hasn't|didn't|cannot|can't)\b[^.]{0,20}$")


def claimed_actions(reply: str, registry: Registry) -> set[str]:
    """The tools of ``registry`` whose action ``reply`` says happened."""
    text = reply.lower().replace("\u2019", "'")
    out = set()
    for tool in registry.tools.values():
        if tool.claim is None:
            continue
        for m in re.finditer(tool.claim, text):
            if not _NEGATION.search(text[max(0, m.start() - 30) : m.start()]):
                out.add(tool.name)
    return out


def shadow_answer(said: str, recorded: Sequence[str], registry: Registry, *, executed: set[str], customer: bool) -> str:
    """The answer of a turn that recorded actions in shadow (``recorded``: their summaries): the
    model's words, unless they claim an action no tool carried out (then the runtime's: passed
    to a colleague, not done), followed by the runtime's own line (a person will follow up)."""
    if claimed_actions(said, registry) - executed:
        said = SHADOW_REPLY.format(summary="; ".join(recorded))
    tail = SHADOW_CUSTOMER_NOTICE if customer else SHADOW_STAFF_NOTICE.format(summary="; ".join(recorded))
    return f"{said}\n\n{tail}" if said else tail
