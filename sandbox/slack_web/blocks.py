"""Block Kit as Slack checks it (what it would refuse) and as a reader sees it (plain text)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

BLOCK_TYPES = {
    "section",
    "divider",
    "header",
    "context",
    "actions",
    "markdown",
    "image",
    "input",
    "rich_text",
    "context_actions",
    "table",
    "plan",
    "task_card",
    "alert",
    "card",
    "carousel",
    "container",
    "file",
    "video",
}
VIEW_ONLY = {"input"}
ELEMENT_LIMITS = {"actions": 25, "context": 10, "context_actions": 5}


def block_problems(blocks: Any, *, limit: int = 50, surface: str = "message") -> list[str]:
    """What Slack would object to in ``blocks`` (empty when they are fine).

    Checks the limits our code can plausibly hit: block count, known types, section
    text 3,000 / fields 10 x 2,000, header 150, markdown 12,000, element counts,
    button text 75 / value 2,000 / action_id 255, unique block ids and action ids.
    """
    if not isinstance(blocks, list):
        return ["blocks must be an array"]
    problems = [f"no more than {limit} items allowed"] if len(blocks) > limit else []
    block_ids: set[str] = set()
    for i, block in enumerate(blocks):
        where = f"[{i}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            problems.append(f"{where} missing type")
            continue
        kind = block["type"]
        if kind not in BLOCK_TYPES or (kind in VIEW_ONLY and surface == "message"):
            problems.append(f"{where} unsupported type {kind}")
            continue
        bid = block.get("block_id")
        if bid is not None:
            if not isinstance(bid, str) or len(bid) > 255 or bid in block_ids:
                problems.append(f"{where} block_id invalid or duplicate")
            block_ids.add(str(bid))
        problems += [f"{where} {p}" for p in _block_problems(kind, block)]
    return problems


def _block_problems(kind: str, block: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    if kind == "section":
        if block.get("text") is None and not block.get("fields"):
            problems.append("section needs text or fields")
        if block.get("text") is not None:
            problems += _text_problems(block["text"], 3000)
        fields = block.get("fields") or []
        if len(fields) > 10:
            problems.append("more than 10 fields")
        for f in fields:
            problems += _text_problems(f, 2000)
        if block.get("accessory") is not None:
            problems += _element_problems(block["accessory"])
    elif kind == "header":
        problems += _text_problems(block.get("text"), 150, plain_only=True)
    elif kind == "markdown":
        text = block.get("text")
        if not isinstance(text, str) or not text or len(text) > 12_000:
            problems.append("markdown text must be 1-12000 chars")
    elif kind in ELEMENT_LIMITS:
        elements = block.get("elements")
        if not isinstance(elements, list) or not 1 <= len(elements) <= ELEMENT_LIMITS[kind]:
            problems.append(f"{kind} needs 1-{ELEMENT_LIMITS[kind]} elements")
            return problems
        action_ids = [e.get("action_id") for e in elements if isinstance(e, dict) and e.get("action_id")]
        if len(action_ids) != len(set(action_ids)):
            problems.append("duplicate action_id in block")
        for e in elements:
            if kind == "context" and isinstance(e, dict) and e.get("type") in ("mrkdwn", "plain_text"):
                problems += _text_problems(e, 3000)
            else:
                problems += _element_problems(e)
    elif kind == "input":
        problems += _text_problems(block.get("label"), 2000, plain_only=True)
        problems += _element_problems(block.get("element"))
    return problems


def _text_problems(obj: Any, limit: int, *, plain_only: bool = False) -> list[str]:
    kinds = ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
    if not isinstance(obj, dict) or obj.get("type") not in kinds:
        return ["bad text object"]
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return ["text must be a non-empty string"]
    return [f"text longer than {limit}"] if len(text) > limit else []


def _element_problems(e: Any) -> list[str]:
    if not isinstance(e, dict) or not isinstance(e.get("type"), str):
        return ["element missing type"]
    problems = []
    action_id = e.get("action_id")
    if action_id is not None and (not isinstance(action_id, str) or len(action_id) > 255):
        problems.append("action_id longer than 255")
    if e["type"] == "button":
        problems += _text_problems(e.get("text"), 75, plain_only=True)
        value = e.get("value")
        if value is not None and (not isinstance(value, str) or len(value) > 2000):
            problems.append("button value longer than 2000")
        if e.get("style") not in (None, "primary", "danger"):
            problems.append("bad button style")
    elif e["type"] == "feedback_buttons":
        for side in ("positive_button", "negative_button"):
            button = e.get(side)
            if not isinstance(button, dict) or not isinstance(button.get("value"), str) or len(button["value"]) > 2000:
                problems.append(f"{side} invalid")
            else:
                problems += _text_problems(button.get("text"), 75, plain_only=True)
    return problems


def text_size(blocks: Any) -> int:
    """All text strings in ``blocks`` — what the (undocumented, ~12k) cumulative cap counts."""
    if isinstance(blocks, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else text_size(v) for k, v in blocks.items())
    if isinstance(blocks, list):
        return sum(text_size(b) for b in blocks)
    return 0


def render_blocks(blocks: Iterable[dict[str, Any]]) -> str:
    """Blocks as a reader sees them, roughly: one line group per block, buttons as ``[Label]``."""
    lines = []
    for block in blocks:
        kind = block.get("type")
        if kind in ("header", "section", "markdown"):
            text = block.get("text")
            lines += [text if isinstance(text, str) else (text or {}).get("text", "")]
            lines += [f.get("text", "") for f in block.get("fields") or []]
        elif kind == "context":
            lines.append(" ".join(e.get("text", "") for e in block.get("elements", []) if isinstance(e, dict)))
        elif kind == "actions":
            lines.append(" ".join(f"[{e.get('text', {}).get('text', '')}]" for e in block.get("elements", [])))
        elif kind == "context_actions":
            lines.append(
                " ".join(
                    f"[{e[side]['text']['text']}]"
                    for e in block.get("elements", [])
                    for side in ("positive_button", "negative_button")
                    if side in e
                )
            )
        elif kind == "divider":
            lines.append("---")
    return "\n".join(line for line in lines if line)
