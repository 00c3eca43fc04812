"""The Grafana dashboard and the Prometheus alert rules in deploy/ query only metrics that
signoff exports, cover what operators watch, and (with promtool installed) the rules pass
their own unit tests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from agent.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "signoff-dashboard.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"), "gauge": ("",)}


def exported_series() -> set[str]:
    """Every series name a :class:`Metrics` registry can expose."""
    names = set()
    for family in Metrics().registry.collect():
        names |= {family.name + s for s in SUFFIXES[family.type]}
    return names


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bsignoff_[a-z0-9_]+", expr))


def dashboard_exprs() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]


def test_dashboard_queries_only_exported_metrics() -> None:
    """No panel queries a metric that signoff does not export (a renamed metric fails here)."""
    known = exported_series()
    unknown = {(title, name) for title, expr in dashboard_exprs() for name in metric_names(expr) - known}
    assert unknown == set()


def test_dashboard_covers_what_operators_watch() -> None:
    """Containment, escalations by reason, gate refusals, approvals by outcome and
    time-to-decision, tokens and cost per conversation, refund amounts, latency p50/p95, stuck
    ledger claims, reconciliations and database errors."""
    board = json.loads(DASHBOARD.read_text())
    titles = " | ".join(p["title"].lower() for p in board["panels"])
    for needle in (
        "containment",
        "escalations by reason",
        "gate refusals",
        "approvals by outcome",
        "time to decision",
        "tokens per conversation",
        "cost per conversation",
        "refund amount",
        "turn latency p50 / p95",
        "model latency p50 / p95",
        "breaker",
        "ledger claims stuck",
        "reconciliations by result",
        "database errors by kind",
    ):
        assert needle in titles, needle
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    assert {t["datasource"]["uid"] for p in board["panels"] if p["type"] != "row" for t in p["targets"]} == {
        "${datasource}"
    }


def test_alert_rules_cover_breaker_escalations_and_refunds_on_exported_metrics() -> None:
    """The starter rules exist, carry a severity and a summary, and query exported metrics."""
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    names = {r["alert"] for r in rules}
    assert {
        "SignoffModelBreakerOpen",
        "SignoffEscalationSpike",
        "SignoffRefundAmountSpike",
        "SignoffAuditHeadWentDown",
        "SignoffLedgerClaimsStuck",
    } <= names
    known = exported_series()
    for r in rules:
        assert r["labels"]["severity"] in ("warning", "critical") and r["annotations"]["summary"]
        assert metric_names(r["expr"]) and metric_names(r["expr"]) <= known, r["alert"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt: prometheus)")
def test_alert_rules_pass_promtool_and_their_unit_tests() -> None:
    """`promtool check rules` and `promtool test rules` (deploy/prometheus/alerts_test.yml)."""
    for args in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
        done = subprocess.run(["promtool", *args], cwd=ALERTS.parent, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
