"""``signoff eval`` on the Shopify backend: each case run on a store seeded from the case's dataset.

The cases cite the dataset's ids (``O-1042``, ``C-7``); the store keeps their numbers
(:mod:`shopify.dataset_ids`), and the run's tools act on the real :class:`ShopifyBackend`
through the Admin API, seen through those ids. Before a run the store is replaced by one seeded
from the case's dataset and its clock is the case's; after it, the store is read back as a
dataset for the judge. A real store cannot be reset per case, so this needs a store that can:
the fake Admin API (``python -m tests.fakes.shopify_api --port P``), whose ``/__fake__/`` routes
do that (:mod:`tests.fakes.shopify.control`). Messages (``send_message``: signoff's own mail,
not the shop's) go to a :class:`MemoryMessages` per store and are read back as the dataset's
outbox."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp

from agent.errors import ConfigError
from agent.evaluation.fixtures import Clock, RunShop, Template
from sandbox.dataset import Dataset, OutboxRecord
from shopify.backend import SUPPORTED_TOOLS
from shopify.config import ShopifyConfig
from shopify.dataset_ids import DatasetIdBackend, to_dataset
from shopify.messages import MESSAGE_TOOLS, ShopMail
from shopify.writes import ShopifyBackend
from storage.db import Database

#: Polls of ``job`` before a cancellation is done (the fake's default is two).
JOB_POLLS = 1
#: The shop's address the evaluation's messages come from.
EVAL_FROM = "support@signoff-eval.example"


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


@dataclass
class MemoryMessages:
    """The evaluation's :class:`~shopify.messages.MessageSender`: nothing leaves the process; what
    was sent and recorded is the run's outbox, which the judge reads back with the store."""

    clock: Clock | None = None
    from_address: str = EVAL_FROM
    _mails: dict[str, ShopMail] = field(default_factory=dict)
    _sent: dict[str, tuple[str, datetime]] = field(default_factory=dict)

    def reset(self, clock: Clock) -> None:
        """A new run: an empty outbox, the case's clock."""
        self.clock, self._mails, self._sent = clock, {}, {}

    async def send(self, mail: ShopMail) -> None:
        self._mails[mail.message_id] = mail

    async def record(self, message_id: str, *, customer_id: str) -> None:
        assert self.clock is not None
        self._sent.setdefault(message_id, (customer_id, self.clock.now))

    async def sent_at(self, message_id: str) -> datetime | None:
        found = self._sent.get(message_id)
        return found[1] if found is not None else None

    def outbox(self) -> list[OutboxRecord]:
        """The run's recorded messages as the dataset's outbox (ids as ``send_message`` shows them)."""
        return [
            OutboxRecord(
                id=f"M-{mid.split('.', 1)[1][:20]}",
                customer_id=to_dataset(customer),
                channel="email",
                to=self._mails[mid].to,
                template=self._mails[mid].template,
                body=self._mails[mid].body,
                sent_at=at,
            )
            for mid, (customer, at) in self._sent.items()
        ]


@dataclass
class ShopifyShops:
    """Stores to run cases on, one per config (as many runs at once as there are stores)."""

    configs: list[ShopifyConfig]
    supported: frozenset[str] | None = SUPPORTED_TOOLS | MESSAGE_TOOLS
    _free: asyncio.Queue[tuple[ShopifyConfig, ShopifyBackend, MemoryMessages]] | None = None
    _backends: list[ShopifyBackend] = field(default_factory=list)
    _session: aiohttp.ClientSession | None = None
    #: Each template's store as seeded (the same every time: read once).
    _seeded: dict[str, Dataset] = field(default_factory=dict)

    @property
    def lanes(self) -> int:
        return len(self.configs)

    def _pool(self) -> asyncio.Queue[tuple[ShopifyConfig, ShopifyBackend, MemoryMessages]]:
        if self._free is None:
            from bot.app import shopify_backend

            self._free = asyncio.Queue()
            for config in self.configs:
                messages = MemoryMessages()
                backend = shopify_backend(config, sender=messages)
                self._backends.append(backend)
                self._free.put_nowait((config, backend, messages))
        return self._free

    async def _call(self, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        async with self._session.request(method, url, json=body) as r:
            if r.status == 404:
                store, route = url.split("/__fake__", 1)
                raise ConfigError(
                    f"signoff eval: {store} cannot be reset per case (no /__fake__{route}): run the evaluation"
                    " against the fake Admin API (python -m tests.fakes.shopify_api)"
                )
            if r.status != 200:
                raise RuntimeError(f"signoff eval: {method} {url}: {r.status} {await r.text()}")
            return await r.json()

    async def open(self, template: Template, *, db: Database, clock: Clock, epoch: datetime) -> RunShop:
        """A store seeded from ``template``'s dataset, its clock the case's."""
        pool = self._pool()
        lane = await pool.get()
        config, backend, messages = lane
        messages.reset(clock)
        base = f"{config.base}/__fake__"
        seed = {
            "dataset": template.dataset.to_json_obj(),
            "rebase_to": _iso(epoch),
            "now": _iso(clock.now),
            "job_polls": JOB_POLLS,
        }

        async def export() -> Dataset:
            store = Dataset.model_validate(await self._call("GET", f"{base}/dataset"))
            return store.model_copy(update={"outbox": messages.outbox()})

        try:
            await self._call("POST", f"{base}/shop", seed)
            key = str(template.path)
            if key not in self._seeded:
                self._seeded[key] = await export()
        except BaseException:
            pool.put_nowait(lane)
            raise

        async def sync_clock() -> None:
            await self._call("POST", f"{base}/now", {"now": _iso(clock.now)})

        async def close() -> None:
            pool.put_nowait(lane)

        return RunShop(
            backend=DatasetIdBackend(backend, before_write=sync_clock),
            before=self._seeded[key],
            export=export,
            close=close,
        )

    async def aclose(self) -> None:
        for backend in self._backends:
            await backend.client.close()
        if self._session is not None:
            await self._session.close()
