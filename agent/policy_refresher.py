"""Picking up a newly applied policy version while running (serve, worker, socket)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agent.errors import ConfigError
from agent.policy import Policy
from agent.policy_store import REFRESH_EVERY_S, parse_stored, policy_state
from storage.audit import AuditLog
from storage.policies import PolicyVersions

log = logging.getLogger(__name__)


class PolicyRefresher:
    """Polls the newest policy audit event and row id; when either moves, reads which version
    is in force (:func:`policy_state`) and hands a new one to ``use``.

    Two indexed ``max`` queries per period, outside any turn; a row inserted without its audit
    event is logged and ignored; a version that fails to parse is logged and the running policy
    kept."""

    def __init__(
        self,
        versions: PolicyVersions,
        use: Callable[[Policy], None],
        *,
        seen_id: int | None,
        every_s: float = REFRESH_EVERY_S,
        seal_key: Ed25519PublicKey | None = None,
        start: str | None = None,
    ) -> None:
        self.versions = versions
        self.use = use
        self.seen_id = seen_id
        self.every_s = every_s
        #: The configured audit key every ``policy.applied`` must be sealed by, and the start policy's text.
        self.seal_key, self.start = seal_key, start
        self._marks: tuple[int | None, int | None] | None = None

    async def check(self) -> bool:
        """Pick up a version newly in force now; whether one was taken."""
        marks = (await self.versions.latest_event_seq(), await self.versions.latest_id())
        if marks == self._marks:
            return False
        self._marks = marks
        state = await policy_state(self.versions, AuditLog(self.versions.db), seal_key=self.seal_key, start=self.start)
        row = state.in_force
        if row is None or row.id == self.seen_id:
            return False
        self.seen_id = row.id
        try:
            policy = parse_stored(row)
        except ConfigError as exc:
            log.error("policy version not taken, the running policy stays: %s", exc)
            return False
        self.use(policy)
        log.info(
            "policy version %s now in force (policy_versions #%s, applied by %s)", row.version, row.id, row.applied_by
        )
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Check every ``every_s`` seconds until ``stop`` is set (a failed check is logged and retried)."""
        while not stop.is_set():
            try:
                await self.check()
            except Exception:
                log.exception("policy refresh failed; retrying")
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.every_s)
            except TimeoutError:
                pass
