"""Wake-ups between processes on PostgreSQL: ``LISTEN``/``NOTIFY``.

A job one process commits (a face's accepted message, an approval's resume) wakes every
``signoff worker`` at once, and a widget event a worker commits wakes the server streaming that
session — instead of at the worker's next claim poll (0.5 s) and the stream's next store poll
(1 s). Triggers send the notifications (:data:`PG_NOTIFY_SQL`), so no write path can forget one:
``NOTIFY`` is transactional, delivered when the inserting transaction commits and never for one
that rolls back. Each process listens on one connection of its own (:class:`Notifications`).

A wake-up is a hint, never the record: the polls stay, and catch whatever a dropped listening
connection missed (the listener reconnects with backoff and then wakes everyone once). SQLite has
no ``NOTIFY``: there a process's own writes wake its worker and streams at once, another's within
a probe's tick (:mod:`storage.probe`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import DDL, Table, event
from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

#: A job was queued (payload: ``[schema]``).
JOBS = "signoff_jobs"
#: A widget event was stored (payload: ``[schema, session id, seq]``).
WIDGET = "signoff_widget"
CHANNELS = (JOBS, WIDGET)

#: The triggers that notify (run by migration 0022 and, for ``create_all`` databases, by the
#: models' ``after_create`` hooks). Jobs notify once per inserting statement; widget events once
#: per row, naming the session and position so a stream already past it is not woken. Channels
#: span the whole database: a payload names its table's schema, and a listener hears only its own
#: (two deployments in one database, or the tests' schemas, never wake each other).
PG_NOTIFY_SQL: dict[str, list[str]] = {
    "jobs": [
        f"""
        CREATE OR REPLACE FUNCTION signoff_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{JOBS}', json_build_array(TG_TABLE_SCHEMA)::text);
            RETURN NULL;
        END;
        $$
        """,
        "CREATE TRIGGER jobs_notify AFTER INSERT ON jobs FOR EACH STATEMENT EXECUTE FUNCTION signoff_jobs_notify()",
    ],
    "widget_events": [
        f"""
        CREATE OR REPLACE FUNCTION signoff_widget_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{WIDGET}', json_build_array(TG_TABLE_SCHEMA, NEW.session_id, NEW.seq)::text);
            RETURN NULL;
        END;
        $$
        """,
        "CREATE TRIGGER widget_events_notify AFTER INSERT ON widget_events "
        "FOR EACH ROW EXECUTE FUNCTION signoff_widget_notify()",
    ],
}
PG_NOTIFY_DROP_SQL = [
    "DROP TRIGGER IF EXISTS widget_events_notify ON widget_events",
    "DROP FUNCTION IF EXISTS signoff_widget_notify()",
    "DROP TRIGGER IF EXISTS jobs_notify ON jobs",
    "DROP FUNCTION IF EXISTS signoff_jobs_notify()",
]

#: Seconds between attempts to listen again after the connection was lost (the last repeats).
RETRY_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)

#: Told a notification's payload after its schema (``[]`` for a job, ``[session id, seq]`` for a
#: widget event); ``None`` after the listener reconnected: anything may have been missed meanwhile.
Handler = Callable[[list[Any] | None], None]

#: The schema of the tables this connection's names resolve to (what its notifications name).
_SCHEMA_SQL = (
    "SELECT nspname FROM pg_namespace WHERE oid = (SELECT relnamespace FROM pg_class WHERE oid = 'jobs'::regclass)"
)


class Notifications:
    """One process's listening connection, open while anything subscribes."""

    def __init__(self, engine: AsyncEngine, *, retry_s: tuple[float, ...] = RETRY_S) -> None:
        self._engine = engine
        self._retry_s = retry_s
        self._handlers: dict[str, list[Handler]] = {channel: [] for channel in CHANNELS}
        self._task: asyncio.Task[None] | None = None
        self._schema: str | None = None
        self._listened = False
        #: Set while the connection listens (tests wait for it).
        self.listening = asyncio.Event()
        #: The listening connection's server process id (tests terminate it).
        self.backend_pid: int | None = None

    @contextlib.contextmanager
    def subscribe(self, channel: str, handler: Handler) -> Iterator[None]:
        """``handler`` is told of ``channel``'s notifications for as long as the block lasts."""
        handlers = self._handlers[channel]  # an unknown channel is a programming error: KeyError
        handlers.append(handler)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="signoff-notify")
        try:
            yield
        finally:
            handlers.remove(handler)

    def _subscribed(self) -> bool:
        return any(self._handlers.values())

    def _tell(self, channel: str, payload: list[Any] | None) -> None:
        for handler in list(self._handlers.get(channel, ())):
            try:
                handler(payload)
            except Exception:  # a subscriber never stops the others hearing
                log.exception("notification handler failed (%s)", channel)

    def _heard(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        try:
            parsed = json.loads(payload)
        except ValueError:
            parsed = None
        if not isinstance(parsed, list) or not parsed or parsed[0] != self._schema:
            return  # another schema's, or not ours
        self._tell(channel, parsed[1:])

    async def _run(self) -> None:
        failures = 0
        try:
            while self._subscribed():
                try:
                    await self._listen()
                    failures = 0
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("notify: not listening (%s); the polls carry on", type(exc).__name__)
                    # A connection that listened and was then lost is retried soon; one that
                    # cannot connect, less and less often.
                    failures = 1 if self.listening.is_set() else failures + 1
                self.listening.clear()
                self.backend_pid = None
                if failures:
                    await asyncio.sleep(self._retry_s[min(failures, len(self._retry_s)) - 1])
        finally:
            self.listening.clear()

    async def _listen(self) -> None:
        """Listen on a connection of the engine's own (its settings, its schema) until the
        connection is lost or no one subscribes; the connection is then discarded, never pooled
        again with its listeners."""
        async with self._engine.connect() as conn:
            try:
                raw = await conn.get_raw_connection()
                driver = raw.driver_connection
                assert driver is not None
                lost = asyncio.Event()
                driver.add_termination_listener(lambda _c: lost.set())
                self._schema = await driver.fetchval(_SCHEMA_SQL)
                for channel in CHANNELS:
                    await driver.add_listener(channel, self._heard)
                self.backend_pid = driver.get_server_pid()
                self.listening.set()
                if self._listened:  # anything committed while no connection listened
                    for channel in CHANNELS:
                        self._tell(channel, None)
                self._listened = True
                while self._subscribed() and not lost.is_set() and not driver.is_closed():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), timeout=1.0)
                if lost.is_set() or driver.is_closed():
                    raise ConnectionError("the listening connection was lost")
            finally:
                await conn.invalidate()

    async def close(self) -> None:
        """Stop listening (the database closing)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def parse_widget(payload: list[Any]) -> tuple[str, int] | None:
    """A widget notification's session id and position; ``None`` when it is not one."""
    if len(payload) != 2 or not isinstance(payload[0], str) or not isinstance(payload[1], int):
        return None
    return payload[0], payload[1]


def register(*tables: Table) -> None:
    """The triggers on databases built with ``create_all`` (tests) too, on PostgreSQL."""
    for table in tables:
        for statement in PG_NOTIFY_SQL[table.name]:
            # DDL %-formats its text.
            event.listen(table, "after_create", DDL(statement.replace("%", "%%")).execute_if(dialect="postgresql"))
