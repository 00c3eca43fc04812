"""Stores and services for evaluation cases.

Every case run gets a fresh SQLite file copied from a template: one template
per distinct set of store overrides, built once per process by running the real
Alembic migrations on an empty file and loading the bundled demo dataset (plus
the overrides) rebased to the evaluation's epoch. Copying a file is far cheaper
than migrating and loading ~1,000 rows for each of k runs of ~60 cases.

The shop a run's tools act on comes from a :class:`Shops`: the sandbox store in that same file
(:class:`SandboxShops`, the default), or another backend seeded from the same dataset (the
Shopify one: ``bot/shopify/evaluation.py``). Either way the judge reads the run's outcome as a
dataset exported from the shop, so the same cases and expectations hold on both.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from agent.evaluation.suite import StoreSpec, parse_duration
from agent.llm.base import ModelClient
from agent.notify import Notifier
from agent.policy import Policy
from agent.services import Services
from agent.services import build_services as _build_services
from sandbox.dataset import DEMO_DATASET_PATH, Dataset, DatasetError, parse_dataset
from sandbox.io import count_rows, export_model, load_dataset
from sandbox.schema import upgrade
from sandbox.store import SandboxStore
from storage.db import Database, create_database
from tools.backend import CommerceBackend

#: Fields that hold times, per collection; override values may be relative (``-3d``).
TIME_FIELDS = {
    "customers": ("created_at",),
    "orders": ("placed_at", "delivered_at"),
    "payments": ("created_at",),
    "refunds": ("created_at",),
    "returns": ("created_at",),
    "invoices": ("issued_at",),
    "outbox": ("sent_at",),
}


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


@dataclass
class Clock:
    """The case's clock: starts at a fixed instant and only moves when a turn advances it."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta) -> None:
        self.now = self.now + by


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _resolve_time(value: Any, as_of: datetime) -> Any:
    if isinstance(value, str) and value[:1] in "+-" and value[1:2].isdigit():
        return _iso(as_of + parse_duration(value))
    return value


def merged_dataset(base: dict[str, Any], spec: StoreSpec) -> Dataset:
    """The base dataset with the case's overrides applied, validated like any dataset."""
    as_of = datetime.fromisoformat(str(base["as_of"]).replace("Z", "+00:00"))
    data = {k: (list(v) if isinstance(v, list) else v) for k, v in base.items()}
    for collection in ("customers", "orders", "payments", "refunds", "returns", "knowledge", "staff"):
        for record in getattr(spec, collection):
            rec = {k: _resolve_time(v, as_of) if k in TIME_FIELDS.get(collection, ()) else v for k, v in record.items()}
            rows = data.setdefault(collection, [])
            at = next((i for i, r in enumerate(rows) if r.get("id") == rec.get("id")), None)
            if at is None:
                rows.append(rec)
            else:
                rows[at] = rec
    for oid, note in spec.notes.items():
        data["orders"] = [{**o, "notes": note} if o["id"] == oid else o for o in data["orders"]]
    for cid, name in spec.names.items():
        data["customers"] = [{**c, "name": name} if c["id"] == cid else c for c in data["customers"]]
    return parse_dataset(data)


@dataclass(frozen=True, kw_only=True)
class Template:
    """A seeded store file and the dataset it holds (times rebased), for diffs after a run."""

    path: Path
    before: Dataset
    counts: dict[str, int]
    #: The case's dataset (the bundled one with the case's overrides), times not yet rebased.
    dataset: Dataset


@dataclass
class TemplateStore:
    """Builds seeded template stores on demand (one per overrides key) and hands out copies."""

    workdir: Path
    epoch: datetime
    base: dict[str, Any] = field(default_factory=lambda: json.loads(DEMO_DATASET_PATH.read_text("utf-8")))
    _templates: dict[str, Template] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _empty: Path | None = None
    _empty_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _copies: int = 0

    @property
    def as_of(self) -> datetime:
        return datetime.fromisoformat(str(self.base["as_of"]).replace("Z", "+00:00"))

    async def _migrated_empty(self) -> Path:
        async with self._empty_lock:
            if self._empty is None:
                path = self.workdir / "migrated-empty.db"
                await upgrade(sqlite_url(path))
                self._empty = path
            return self._empty

    async def template(self, spec: StoreSpec) -> Template:
        """The template for ``spec``'s overrides (built on first use)."""
        key = spec.overrides_key()
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self._templates:
                self._templates[key] = await self._build(spec, hashlib.sha256(key.encode()).hexdigest()[:16])
            return self._templates[key]

    async def _build(self, spec: StoreSpec, name: str) -> Template:
        dataset = merged_dataset(self.base, spec)
        path = self.workdir / f"template-{name}.db"
        await asyncio.to_thread(shutil.copyfile, await self._migrated_empty(), path)
        db = create_database(sqlite_url(path))
        try:
            await load_dataset(db, dataset, rebase_to=self.epoch)
            before = await export_model(db)
            counts = await count_rows(db)
        finally:
            await db.dispose()
        return Template(path=path, before=before, counts=counts, dataset=dataset)

    def lane(self) -> Lane:
        """A new lane (one run at a time on its own file)."""
        self._copies += 1
        path = self.workdir / f"lane-{self._copies}.db"
        return Lane(path=path)

    def clock_for(self, spec: StoreSpec) -> Clock:
        return Clock(self.epoch + parse_duration(spec.clock))


@dataclass(kw_only=True)
class Lane:
    """A file slot for one run at a time: before each run its database is replaced by a fresh
    template copy with a fresh handle (a handle caches the audit head, so it never outlives its file)."""

    path: Path
    db: Database | None = None

    async def reset(self, template: Template) -> Database:
        await self.close()
        await asyncio.to_thread(_replace_file, template.path, self.path)
        self.db = create_database(sqlite_url(self.path))
        return self.db

    async def close(self) -> None:
        if self.db is not None:
            await self.db.dispose()
            self.db = None


def _replace_file(source: Path, target: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(source, target)


@dataclass(frozen=True, kw_only=True)
class RunShop:
    """The shop of one run: the backend its tools act on, the shop as a dataset before the run,
    how to read it again afterwards, and how to let it go."""

    backend: CommerceBackend
    before: Dataset
    export: Callable[[], Awaitable[Dataset]]
    close: Callable[[], Awaitable[None]]


class Shops(Protocol):
    """Where each run's shop comes from."""

    @property
    def lanes(self) -> int:
        """How many runs it can hold at once."""
        ...

    @property
    def supported(self) -> frozenset[str] | None:
        """The backend's ``supported_tools`` (``None``: every catalogue tool)."""
        ...

    async def open(self, template: Template, *, db: Database, clock: Clock, epoch: datetime) -> RunShop:
        """A fresh shop seeded from ``template``'s dataset (rebased to ``epoch``), on ``clock``."""
        ...

    async def aclose(self) -> None:
        """Release whatever :meth:`open` needed (sessions, connections)."""
        ...


async def _nothing() -> None:
    return None


@dataclass
class SandboxShops:
    """The sandbox store in the run's own SQLite file (already seeded from the template)."""

    lanes: int = 1_000
    supported: frozenset[str] | None = None

    async def open(self, template: Template, *, db: Database, clock: Clock, epoch: datetime) -> RunShop:
        async def export() -> Dataset:
            return await export_model(db)

        return RunShop(backend=SandboxStore(db, clock=clock), before=template.before, export=export, close=_nothing)

    async def aclose(self) -> None:
        return None


def build_services(
    *,
    db: Database,
    model: ModelClient,
    clock: Callable[[], datetime],
    policy: Policy | None = None,
    notifier: Notifier | None = None,
    backend: CommerceBackend | None = None,
) -> Services:
    """The runtime's collaborators over ``db`` and ``backend`` (default: the sandbox store in
    ``db``), wired as the composition root wires them."""
    return _build_services(
        db=db,
        model=model,
        backend=backend or SandboxStore(db, clock=clock),
        policy=policy,
        notifier=notifier,
        clock=clock,
    )


def open_database(path: Path) -> Database:
    return create_database(sqlite_url(path))


__all__ = [
    "Clock",
    "DatasetError",
    "Lane",
    "RunShop",
    "SandboxShops",
    "Shops",
    "Template",
    "TemplateStore",
    "build_services",
    "merged_dataset",
    "open_database",
    "sqlite_url",
]
