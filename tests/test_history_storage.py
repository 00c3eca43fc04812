"""History is stored verbatim: a message list with text, tool_use and tool_result blocks
round-trips byte for byte (key order, unicode, nesting) on SQLite and PostgreSQL."""

from __future__ import annotations

import json

from storage.conversations import ConversationRepo
from storage.db import Database
from storage.steps import StepWrite

MESSAGES = [
    ("user", [{"type": "text", "text": 'Où est ma commande O-1042 ? 🙂 "quoted" \\ back\\slash'}]),
    (
        "assistant",
        [
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": "toolu_01A",
                "name": "get_order",
                "input": {"order_id": "O-1042", "z_last": [3, 2, 1], "a_first": {"nested": None, "b": 1.5}},
            },
            {"type": "tool_use", "id": "toolu_01B", "name": "search_knowledge", "input": {"query": "refund window"}},
        ],
    ),
    (
        "user",
        [
            {"type": "tool_result", "tool_use_id": "toolu_01A", "content": '{"status": "DELIVERED"}'},
            {
                "tool_use_id": "toolu_01B",
                "type": "tool_result",
                "is_error": True,
                "content": [{"type": "text", "text": '{"error": "not_found"}'}],
            },
        ],
    ),
]


async def test_history_round_trips_byte_for_byte(any_db: Database) -> None:
    repo = ConversationRepo(any_db)
    conv = await repo.create(
        id="conv_rt",
        channel="api",
        external_ref=None,
        principal_kind="customer",
        principal_id="C-7",
        customer_id="C-7",
        model="m",
        prompt_version="p",
        loaded_groups=[],
    )
    run = await repo.create_run(
        id="run_rt", conversation_id=conv.id, model="m", prompt_version="p", policy_version="v", trace_id="t"
    )
    for role, content in MESSAGES:
        await repo.commit(StepWrite(conversation_id=conv.id, run_id=run.id, messages=[(role, content)]))
    stored = await repo.history(conv.id)
    assert [m.seq for m in stored] == [0, 1, 2]
    assert [m.role for m in stored] == [r for r, _ in MESSAGES]
    for m, (_, content) in zip(stored, MESSAGES, strict=True):
        assert json.dumps(m.content, ensure_ascii=False) == json.dumps(content, ensure_ascii=False)
