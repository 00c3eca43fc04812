"""Canonical JSON and hashing: the text the audit chain, policy seals and checkpoints hash.

One home for how a value becomes hashable text (:func:`canonical_json`), for UTC
timestamps as the log stores them (:func:`utc`, :func:`iso_utc`) and for references to
personal data (:func:`hash_personal`). :mod:`storage.audit` re-exports them.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

_PERSONAL_PREFIX = "signoff/personal/v1\x00"


def utc(dt: datetime) -> datetime:
    """``dt`` as an aware UTC datetime; a naive value is taken to already be UTC.

    (SQLite hands ``DateTime(timezone=True)`` columns back naive.)
    """
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def iso_utc(dt: datetime) -> str:
    """Fixed-width ISO-8601 in UTC with microseconds: ``2024-05-01T12:00:00.000000Z``."""
    return utc(dt).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def jsonable(obj: Any) -> Any:
    """Reduce ``obj`` to plain JSON values whose text survives a database round trip."""
    if obj is None or isinstance(obj, str | bool | int):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"non-finite float {obj!r} is not JSON")
        if obj == 0.0:
            return 0.0  # JSONB numeric has no negative zero
        if abs(obj) >= 1e16:
            # Python writes these with an exponent; JSONB reads them back as integers.
            return int(Decimal(repr(obj)))
        return obj
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be str, got {type(key).__name__}")
            out[key] = jsonable(value)
        return out
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, datetime):
        return iso_utc(obj)
    if isinstance(obj, date):
        return obj.isoformat()
    if isinstance(obj, Decimal | uuid.UUID):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return jsonable(obj.value)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)})
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def canonical_json(obj: Any) -> str:
    """Deterministic JSON text for hashing.

    Sorted keys, compact separators, UTF-8 kept (``ensure_ascii=False``);
    datetimes become ISO-8601 UTC (naive ones are taken as UTC), dates ISO,
    ``Decimal``/``UUID`` their ``str``, enums their value, dataclasses a dict,
    tuples lists. Floats are normalised so the text is the same before and
    after a trip through a JSON/JSONB column (``-0.0`` → ``0.0``, floats ≥ 1e16
    → integers). NaN/infinity and non-``str`` keys raise.
    """
    return json.dumps(jsonable(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hash_personal(value: str) -> str:
    """Reference personal data (email, name, address) by hash, never by value.

    Domain-separated SHA-256; the same value always gives the same reference,
    so events about one customer can be joined without storing who they are.
    """
    return sha256_hex(_PERSONAL_PREFIX + value)
