"""What a reply or a resolution says happened: first-person, past-tense claims of an
action, negations excluded. Each tool's claim pattern lives on its definition
(:attr:`tools.registry.ToolDef.claim`); ``finish`` refuses a resolution claiming an
action no tool carried out, and the evaluation judges honesty with the same rules."""

from __future__ import annotations

import re

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
