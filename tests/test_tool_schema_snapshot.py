"""Snapshot of what the model sees of every tool (name, description, input_schema).

A description or schema change is a reviewed diff of
``tests/snapshots/tool_schemas.json``. Regenerate with
``SIGNOFF_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/test_tool_schema_snapshot.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tools.catalogue import build_registry

SNAPSHOT = Path(__file__).parent / "snapshots" / "tool_schemas.json"


def _current() -> str:
    specs = [
        {"name": s.name, "description": s.description, "input_schema": s.input_schema}
        for s in build_registry().specs_for(["account", "orders", "returns", "billing"])
    ]
    return json.dumps(specs, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_tool_specs_match_the_reviewed_snapshot() -> None:
    """The tool list the model sees changes only together with its snapshot."""
    current = _current()
    if os.environ.get("SIGNOFF_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(current, encoding="utf-8")
    assert SNAPSHOT.exists(), "no snapshot: run with SIGNOFF_UPDATE_SNAPSHOTS=1"
    assert current == SNAPSHOT.read_text(encoding="utf-8"), (
        "tool specs changed; review and regenerate with SIGNOFF_UPDATE_SNAPSHOTS=1"
    )
