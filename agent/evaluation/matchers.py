"""Matching a model's tool arguments and replies against a case's expectations.

Argument values in a case are literals (equal), or a matcher — a mapping with
exactly one of these keys:

``{any: true}``          the argument is present, any value
``{regex: "^O-10"}``     the value's text matches (``re.search``)
``{contains: x}``        a list holds ``x`` / a string contains ``x``
``{subset: {...}|[...]}`` a mapping holds these items / a list holds these elements
``{one_of: [a, b]}``     equals one of these

``match: subset`` (default) checks only the named arguments; ``match: exact``
also requires that no other argument was given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from agent.evaluation.suite import ReplyExpect, ToolExpect
from storage.records import Proposal

MATCHER_KEYS = frozenset({"any", "regex", "contains", "subset", "one_of"})


def is_matcher(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in MATCHER_KEYS


def value_matches(expected: Any, actual: Any) -> bool:
    """One expected value (literal or matcher) against one actual value."""
    if is_matcher(expected):
        ((kind, arg),) = expected.items()
        match kind:
            case "any":
                return bool(arg) == (actual is not None)
            case "regex":
                return actual is not None and re.search(str(arg), str(actual)) is not None
            case "contains":
                return (arg in actual) if isinstance(actual, list | str) else False
            case "one_of":
                return any(value_matches(a, actual) for a in arg)
            case "subset":
                if isinstance(arg, dict):
                    return isinstance(actual, dict) and all(
                        k in actual and value_matches(v, actual[k]) for k, v in arg.items()
                    )
                return isinstance(actual, list) and all(any(value_matches(e, a) for a in actual) for e in arg)
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(value_matches(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(value_matches(e, a) for e, a in zip(expected, actual, strict=True))
    return bool(expected == actual)


def args_match(expect: ToolExpect, args: Any) -> bool:
    if expect.args is None:
        return True
    if not isinstance(args, dict):
        return False
    if expect.match == "exact" and set(args) - set(expect.args):
        return False
    return all(k in args and value_matches(v, args[k]) for k, v in expect.args.items())


def gate_matches(expect: ToolExpect, p: Proposal) -> bool:
    """The gate's decision and reason, and the result's error code, as expected."""
    if expect.gate is not None and p.decision != expect.gate:
        return False
    if expect.error is not None and not (
        p.is_error and isinstance(p.result, dict) and p.result.get("error") == expect.error
    ):
        return False
    return expect.reason is None or p.reason == expect.reason


def find_in_order(expects: list[ToolExpect], proposals: list[Proposal]) -> tuple[list[str], list[str]]:
    """Check ``expects`` as an ordered subsequence of ``proposals``.

    Returns (tool-choice problems, argument problems): a tool never proposed
    after the previous match is a choice problem; a tool proposed but never with
    matching arguments (or gate outcome) is an argument problem.
    """
    choice, arguments = [], []
    at = 0
    for e in expects:
        named = [i for i in range(at, len(proposals)) if proposals[i].tool == e.tool]
        if not named:
            choice.append(f"{e.tool} was not proposed" + (" (after the previous expected call)" if at else ""))
            continue
        hit = next((i for i in named if args_match(e, proposals[i].arguments) and gate_matches(e, proposals[i])), None)
        if hit is None:
            got = proposals[named[0]]
            arguments.append(
                f"{e.tool}: no call matched {e.args or {}}"
                f"{f' with gate {e.gate}' if e.gate else ''}{f'/{e.reason}' if e.reason else ''}"
                f"{f' error {e.error}' if e.error else ''}; "
                f"first was {got.arguments} → {got.decision}/{got.reason}"
            )
            at = named[0] + 1
            continue
        at = hit + 1
    return choice, arguments


def _fact_present(fact: str, text: str) -> bool:
    if fact.startswith("re:"):
        return re.search(fact[3:], text, re.I | re.S) is not None
    return fact.lower() in text.lower()


def reply_problems(expect: ReplyExpect | None, reply: str, *, where: str = "final reply") -> list[str]:
    """Facts missing from ``reply`` and claims it must not make."""
    if expect is None:
        return []
    out = [f"{where} does not state {f!r}" for f in expect.states if not _fact_present(f, reply)]
    out += [f"{where} claims {f!r}" for f in expect.not_claims if _fact_present(f, reply)]
    return out


def names(proposals: Iterable[Proposal]) -> list[str]:
    return [p.tool for p in proposals]


__all__ = ["args_match", "find_in_order", "gate_matches", "is_matcher", "reply_problems", "value_matches"]
