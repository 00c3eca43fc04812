"""The rollout report's figures on ``/metrics``: agreement, misses and false actions per unit
(channel, principal kind, tool) as Prometheus gauges, computed from the database at scrape time
at most every :data:`EVERY_S` seconds over the last :data:`SINCE` (the report's default)."""

from __future__ import annotations

import time
from datetime import timedelta

from agent.metrics import Metrics
from agent.rollout import Report, build_report
from agent.services import Services
from storage.rollout import RolloutFacts

EVERY_S = 300.0
SINCE = timedelta(days=30)


def publish(metrics: Metrics, report: Report) -> None:
    """Set the gauges from ``report`` (a unit no longer reported is dropped)."""
    gauges = (
        metrics.rollout_proposed,
        metrics.rollout_agreement,
        metrics.rollout_misses,
        metrics.rollout_false_actions,
    )
    for gauge in gauges:
        gauge.clear()
    for row in report.tools:
        if row.tool == "-":
            continue
        labels = (row.channel, row.kind, row.tool)
        f = row.figures
        metrics.rollout_proposed.labels(*labels).set(f.proposed)
        if f.agreement is not None:
            metrics.rollout_agreement.labels(*labels).set(f.agreement)
        metrics.rollout_misses.labels(*labels).set(f.misses)
        metrics.rollout_false_actions.labels(*labels).set(f.false_actions)


async def refresh(metrics: Metrics, services: Services, *, force: bool = False) -> bool:
    """Recompute the gauges when the last computation is older than :data:`EVERY_S`; whether it ran."""
    at = time.monotonic()
    if not force and metrics.rollout_read_at is not None and at - metrics.rollout_read_at < EVERY_S:
        return False
    metrics.rollout_read_at = at
    now = services.clock()
    report = await build_report(
        RolloutFacts(services.db), registry=services.registry, policy=services.policy, since=now - SINCE, until=now
    )
    publish(metrics, report)
    return True
