"""One turn of a conversation at a time across replicas: two runtimes over two engines on one
database (what two `signoff serve` replicas are) never run turns of one conversation at once
— the second waits, or after its bounded wait gets Busy; a holder killed mid-turn (SIGKILL) is
taken over; a long turn keeps its lease. SQLite and PostgreSQL (when SIGNOFF_TEST_PG_URL is set)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from agent.errors import Busy
from agent.llm.base import ModelRequest
from agent.llm.testing import FunctionModel
from agent.runtime import Runtime
from bot.app import sandbox_services
from storage.db import Database, create_database
from storage.leases import Leases
from storage.locks import LockBusy
from tests.conftest import PG_URL, drop_pg, make_pg, make_sqlite
from tests.support import C7, seeded

GUARD_S = 30  # hang guards only: every wait below ends on an event or a lease, never on a clock
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Shared:
    """Two Database handles on one database (two replicas), and how a third process reaches it."""

    a: Database
    b: Database
    url: str
    schema: str | None


@pytest.fixture(params=["sqlite", "postgresql"])
async def shared(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Shared]:
    if request.param == "sqlite":
        a = await make_sqlite(tmp_path / "t.db")
        url = f"sqlite+aiosqlite:///{tmp_path / 't.db'}"
        b = create_database(url)
        yield Shared(a, b, url, None)
        await a.dispose()
        await b.dispose()
        return
    if not PG_URL:
        pytest.skip("SIGNOFF_TEST_PG_URL not set")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    a = await make_pg(schema)
    b = Database.of(create_async_engine(PG_URL, connect_args={"server_settings": {"search_path": schema}}))
    yield Shared(a, b, PG_URL, schema)
    await a.dispose()
    await b.dispose()
    await drop_pg(schema)


class Recorder:
    """A model whose every call is an interval; the first call of ``hold_first`` waits for ``release``."""

    def __init__(self, spans: list[tuple[str, float, float]], who: str, *, hold_first: bool = False) -> None:
        self.spans, self.who = spans, who
        self.entered, self.release = asyncio.Event(), asyncio.Event()
        self.hold_first = hold_first
        self.model = FunctionModel(self._answer)

    async def _answer(self, _request: ModelRequest) -> Any:
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.entered.set()
        if self.hold_first:
            self.hold_first = False
            await self.release.wait()
        else:
            await asyncio.sleep(0.01)
        self.spans.append((self.who, start, loop.time()))
        return f"answered by {self.who}"


def disjoint(spans: list[tuple[str, float, float]]) -> bool:
    ordered = sorted(spans, key=lambda s: s[1])
    return all(prev[2] <= nxt[1] for prev, nxt in zip(ordered, ordered[1:], strict=False))


async def two_replicas(
    shared: Shared, spans: list[tuple[str, float, float]]
) -> tuple[Runtime, Recorder, Runtime, Recorder]:
    ra, rb = Recorder(spans, "A", hold_first=True), Recorder(spans, "B")
    a = (await seeded(shared.a, ra.model)).runtime
    b = Runtime(sandbox_services(db=shared.b, model=rb.model))
    return a, ra, b, rb


async def test_two_replicas_never_run_one_conversations_turns_at_once(shared: Shared) -> None:
    spans: list[tuple[str, float, float]] = []
    a, ra, b, rb = await two_replicas(shared, spans)
    conv = await a.open_conversation(principal=C7, channel="api")
    async with asyncio.timeout(GUARD_S):
        first = asyncio.create_task(
            a.chat(principal=C7, channel="api", message="where is my order?", conversation_id=conv.id)
        )
        await ra.entered.wait()  # replica A is inside its turn (its model call is in flight)
        second = asyncio.create_task(
            b.chat(principal=C7, channel="api", message="and my refund?", conversation_id=conv.id)
        )
        for _ in range(30):  # let replica B reach the lease and poll it a while
            await asyncio.sleep(0.01)
        assert not rb.entered.is_set(), "replica B ran a turn while replica A held the conversation"
        ra.release.set()
        results = await asyncio.gather(first, second)
    assert [r.conversation_id for r in results] == [conv.id, conv.id]
    assert disjoint(spans) and [s[0] for s in sorted(spans, key=lambda s: s[1])] == ["A", "B"]
    # A different conversation is never held up by this one's lease.
    other = await b.open_conversation(principal=C7, channel="api")
    ra.hold_first = True
    ra.entered.clear()
    ra.release.clear()
    async with asyncio.timeout(GUARD_S):
        held = asyncio.create_task(a.chat(principal=C7, channel="api", message="hi", conversation_id=conv.id))
        await ra.entered.wait()
        free = await b.chat(principal=C7, channel="api", message="hi", conversation_id=other.id)
        assert free.conversation_id == other.id and not held.done()
        ra.release.set()
        await held


async def test_a_replica_that_waits_too_long_gets_busy_and_changes_nothing(shared: Shared) -> None:
    spans: list[tuple[str, float, float]] = []
    a, ra, b, rb = await two_replicas(shared, spans)
    b._leases.wait_s = 0.2
    conv = await a.open_conversation(principal=C7, channel="api")
    async with asyncio.timeout(GUARD_S):
        first = asyncio.create_task(a.chat(principal=C7, channel="api", message="hello", conversation_id=conv.id))
        await ra.entered.wait()
        before = len(await b.s.conversations.history(conv.id))
        with pytest.raises(Busy):
            await b.chat(principal=C7, channel="api", message="are you there?", conversation_id=conv.id)
        assert len(await b.s.conversations.history(conv.id)) == before
        ra.release.set()
        await first
    assert not rb.entered.is_set()
    # Once A gave the conversation back, B takes it at once.
    async with asyncio.timeout(GUARD_S):
        again = await b.chat(principal=C7, channel="api", message="are you there?", conversation_id=conv.id)
    assert again.conversation_id == conv.id and rb.entered.is_set()


async def test_many_turns_through_two_replicas_never_overlap(shared: Shared) -> None:
    spans: list[tuple[str, float, float]] = []
    a, ra, b, rb = await two_replicas(shared, spans)
    ra.hold_first = False
    conv = await a.open_conversation(principal=C7, channel="api")

    async def send(rt: Runtime, i: int) -> None:
        await rt.chat(principal=C7, channel="api", message=f"message {i}", conversation_id=conv.id)

    async with asyncio.timeout(GUARD_S * 2):
        await asyncio.gather(*(send(a if i % 2 else b, i) for i in range(12)))
    assert len(spans) == 12 and {s[0] for s in spans} == {"A", "B"}
    assert disjoint(spans)


HOLDER = """
import asyncio, sys
from sqlalchemy.ext.asyncio import create_async_engine
from storage.db import Database, create_database
from storage.leases import Leases

async def main(url, schema, conv):
    if schema:
        db = Database.of(create_async_engine(url, connect_args={"server_settings": {"search_path": schema}}))
    else:
        db = create_database(url)
    async with Leases(db).hold(conv):
        print("held", flush=True)
        await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
"""


async def test_a_holder_killed_mid_turn_is_taken_over(shared: Shared) -> None:
    conv = f"conv_{uuid.uuid4().hex[:8]}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLDER,
        shared.url,
        shared.schema or "",
        conv,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(GUARD_S):
            assert (await proc.stdout.readline()).strip() == b"held"
        leases = Leases(shared.b)
        with pytest.raises(LockBusy):
            async with leases.hold(conv, wait_s=0.2):
                pass
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        # Taken over long before the lease would expire (SQLite: the pid is gone; PostgreSQL:
        # the killed session's advisory lock went with it).
        async with asyncio.timeout(GUARD_S):
            async with leases.hold(conv, wait_s=GUARD_S / 2):
                pass
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_long_turn_keeps_its_lease(shared: Shared) -> None:
    """A turn that outlives the lease's own life (a slow model) keeps it: SQLite renews the
    row; PostgreSQL's lock lives with the session."""
    # Renewed every third of its life: the holder's loop may stall for two thirds (a busy machine)
    # before a contender could see it expired.
    lease_s = 1.5
    holder, contender = Leases(shared.a, lease_s=lease_s), Leases(shared.b, lease_s=lease_s)
    order: list[str] = []
    inside = asyncio.Event()

    async def hold() -> None:
        async with holder.hold("conv_long"):
            inside.set()
            await asyncio.sleep(3.5 * lease_s)  # several lease lives, the contender polling throughout
            order.append("holder out")

    async def contend() -> None:
        await inside.wait()
        async with contender.hold("conv_long", wait_s=GUARD_S):
            order.append("contender in")

    async with asyncio.timeout(GUARD_S):
        await asyncio.gather(hold(), contend())
    assert order == ["holder out", "contender in"]


async def test_cancelled_waiters_and_holders_leak_no_lease(shared: Shared) -> None:
    leases, other = Leases(shared.a), Leases(shared.b)
    inside = asyncio.Event()

    async def hold_forever() -> None:
        async with leases.hold("conv_c"):
            inside.set()
            await asyncio.sleep(3600)

    async def wait_forever() -> None:
        async with other.hold("conv_c"):
            raise AssertionError("the holder never let go")

    async with asyncio.timeout(GUARD_S):
        holder = asyncio.create_task(hold_forever())
        await inside.wait()
        waiter = asyncio.create_task(wait_forever())
        await asyncio.sleep(0.05)
        waiter.cancel()
        holder.cancel()
        for task in (waiter, holder):
            with pytest.raises(asyncio.CancelledError):
                await task
        async with other.hold("conv_c", wait_s=GUARD_S / 2):
            pass
        async with leases.hold("conv_c", wait_s=GUARD_S / 2):
            pass


async def test_recovery_skips_a_run_whose_conversation_another_replica_holds(shared: Shared) -> None:
    """A worker starting up while another replica is mid-turn in a conversation with a
    ``running`` run does not die on the busy lease: it leaves that run to its holder."""
    from agent.worker import recover

    spans: list[tuple[str, float, float]] = []
    a, _ra, b, rb = await two_replicas(shared, spans)
    b._leases.wait_s = 0.2
    conv = await a.open_conversation(principal=C7, channel="api")
    run = (await a.turn(conv, C7)).run
    assert run.status == "running"
    async with asyncio.timeout(GUARD_S):
        async with a._leases.hold(conv.id):
            await recover(b, orphan_after_s=0)
            fresh = await b.s.conversations.get_run(run.id)
            assert fresh is not None and fresh.status == "running" and not rb.entered.is_set()
        # Once the holder let go, recovery finishes the run.
        await recover(b, orphan_after_s=0)
    done = await b.s.conversations.get_run(run.id)
    assert done is not None and done.status != "running" and rb.entered.is_set()
