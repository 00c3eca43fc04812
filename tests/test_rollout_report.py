"""`signoff rollout report` (C16): shadow proposals against what staff actually did, per intent
and per tool, and the `rollout.advance` thresholds — over a scripted set of proposals (agree,
disagree on the amount, staff did nothing, staff acted before, a customer acting, an error),
once through the real runtime, and `--since` parsing."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.errors import ConfigError
from agent.planner import DemoPlanner
from agent.policy import Policy
from agent.rollout import Report, build_report, parse_since
from agent.rollout_render import as_json, render
from bot.cli import main
from storage.audit import sha256_hex
from storage.conversations import ConversationRepo
from storage.db import Database
from storage.rollout import RolloutFacts
from storage.steps import NewProposal, ProposalOutcome, StepWrite
from tests.gatekeeper_kit import policy_with
from tests.support import Clock, app_setting, seeded
from tools.catalogue import build_registry
from tools.context import Principal

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
EV = ["refund-policy@7#window"]


def _policy(min_samples: int = 3, min_agreement: float = 0.5) -> Policy:
    return policy_with(
        rollout={
            "default": "full",
            "channels": {"slack": {"customer": "shadow", "rep": "full"}, "api": {"rep": "full"}},
            "advance": {"min_samples": min_samples, "min_agreement": min_agreement},
        }
    )


class Script:
    """Conversations and proposals written through the conversation repository, at scripted times."""

    def __init__(self, db: Database) -> None:
        self.clock = Clock(T0)
        self.repo = ConversationRepo(db, clock=self.clock)
        self.n = 0

    async def conversation(self, cid: str, *, channel: str, kind: str, who: str, customer: str, opening: str) -> None:
        self.clock.now = T0 - timedelta(days=1)
        await self.repo.create(
            id=cid,
            channel=channel,
            external_ref=None,
            principal_kind=kind,
            principal_id=who,
            customer_id=customer,
            model="m",
            prompt_version="p",
            loaded_groups=[],
        )
        await self.repo.create_run(
            id=f"run_{cid}", conversation_id=cid, model="m", prompt_version="p", policy_version="v1", trace_id="t"
        )
        await self.repo.commit(
            StepWrite(
                conversation_id=cid, run_id=f"run_{cid}", messages=[("user", [{"type": "text", "text": opening}])]
            )
        )

    async def proposal(
        self,
        cid: str,
        principal: str,
        tool: str,
        args: dict[str, Any],
        decision: str,
        at: datetime,
        *,
        error: bool = False,
    ) -> None:
        self.n += 1
        self.clock.now = at
        pid = f"prop_{self.n}"
        await self.repo.commit(
            StepWrite(
                conversation_id=cid,
                run_id=f"run_{cid}",
                new_proposals=[
                    NewProposal(
                        id=pid,
                        tool_use_id=f"tu_{self.n}",
                        tool=tool,
                        arguments=args,
                        args_hash=sha256_hex(json.dumps(args, sort_keys=True)),
                        principal=principal,
                        step=self.n,
                        policy_version="v1",
                    )
                ],
                outcomes=[ProposalOutcome(id=pid, decision=decision, reason=None, result={}, is_error=error)],
            )
        )


def _refund(order: str, amount: int, reason: str = "damaged") -> dict[str, Any]:
    return {"order_id": order, "amount_minor": amount, "currency": "USD", "reason_code": reason, "evidence": EV}


async def _scripted(db: Database) -> None:
    s = Script(db)
    await s.conversation(
        "c7",
        channel="slack",
        kind="customer",
        who="C-7",
        customer="C-7",
        opening="O-1042 arrived damaged, refund please",
    )
    await s.conversation(
        "c8", channel="slack", kind="customer", who="C-8", customer="C-8", opening="I was charged twice"
    )
    await s.conversation(
        "c9", channel="slack", kind="customer", who="C-9", customer="C-9", opening="Please cancel my order"
    )
    await s.conversation("r7", channel="api", kind="rep", who="S-1", customer="C-7", opening="assist C-7")
    await s.conversation("r8", channel="api", kind="rep", who="S-2", customer="C-8", opening="assist C-8")
    await s.conversation("r9", channel="api", kind="rep", who="S-1", customer="C-9", opening="assist C-9")
    hour = timedelta(hours=1)
    # agree: the same refund, executed by a rep an hour later (the model proposed it twice: one sample)
    await s.proposal("c7", "customer:C-7", "issue_refund", _refund("O-1042", 3000), "record", T0)
    await s.proposal("c7", "customer:C-7", "issue_refund", _refund("O-1042", 3000), "record", T0 + hour / 2)
    # a different evidence list is not a different action; the rep's own note is free text
    await s.proposal(
        "r7", "rep:S-1", "issue_refund", {**_refund("O-1042", 3000), "evidence": ["other@1#x"]}, "execute", T0 + hour
    )
    # disagree on the amount
    await s.proposal("c8", "customer:C-8", "issue_refund", _refund("O-1050", 5000), "record", T0)
    await s.proposal("r8", "rep:S-2", "issue_refund", _refund("O-1050", 4000), "execute", T0 + hour)
    # staff did nothing: what happened instead does not count (a customer's own execution, a failed
    # staff attempt, another order, the same refund for another customer)
    await s.proposal("c9", "customer:C-9", "issue_refund", _refund("O-1061", 2000), "record", T0)
    await s.proposal("c9", "customer:C-9", "issue_refund", _refund("O-1061", 2000), "execute", T0 + hour)
    await s.proposal("r9", "rep:S-1", "issue_refund", _refund("O-1061", 2000), "execute", T0 + hour, error=True)
    await s.proposal("r9", "rep:S-1", "issue_refund", _refund("O-1062", 2000), "execute", T0 + hour)
    await s.proposal("r7", "rep:S-1", "issue_refund", _refund("O-1061", 2000), "execute", T0 + hour)
    # staff acted BEFORE the proposal: not a match
    cancel = {"order_id": "O-1063", "reason": "customer_request"}
    await s.proposal("r9", "rep:S-1", "cancel_order", cancel, "execute", T0 - hour)
    await s.proposal("c9", "customer:C-9", "cancel_order", cancel, "record", T0)
    # before the window: not a sample
    await s.proposal("c8", "customer:C-8", "issue_refund", _refund("O-1051", 100), "record", T0 - timedelta(days=3))


async def _report(db: Database, policy: Policy) -> Report:
    return await build_report(
        RolloutFacts(db),
        registry=build_registry(),
        policy=policy,
        since=T0 - timedelta(days=1),
        until=T0 + timedelta(days=1),
    )


def _tool(report: Report, channel: str, kind: str, tool: str) -> Any:
    return next(r for r in report.tools if (r.channel, r.kind, r.tool) == (channel, kind, tool))


async def test_scripted_shadow_proposals_against_staff_actions(any_db: Database) -> None:
    await _scripted(any_db)
    report = await _report(any_db, _policy(min_samples=3, min_agreement=0.5))
    refunds = _tool(report, "slack", "customer", "issue_refund")
    assert (refunds.figures.proposed, refunds.figures.staff_did, refunds.figures.same_args) == (3, 2, 1)
    assert refunds.stage == "shadow" and refunds.next == "assist"
    assert refunds.verdict == "not yet: agreement 33.3% < 50%"
    cancels = _tool(report, "slack", "customer", "cancel_order")
    assert (cancels.figures.proposed, cancels.figures.staff_did, cancels.figures.same_args) == (1, 0, 0)
    assert cancels.verdict == "not yet: 1/3 samples"
    # per intent (tools.intent.classify of each conversation's opening message)
    assert sum(f.proposed for f in report.intents.values()) == 4
    assert report.intents["billing+orders+returns"].proposed == 1  # "arrived damaged, refund"
    assert report.intents["billing+orders+returns"].same_args == 1
    assert report.intents["billing+orders"].staff_did == 1 and report.intents["billing+orders"].same_args == 0
    # shadow surfaces the policy names are listed even with nothing recorded; stages come from the policy
    assert {(r.channel, r.kind) for r in report.tools} == {("slack", "customer")}
    text = render(report)
    assert "slack/customer/issue_refund" in text and "not yet: agreement 33.3% < 50%" in text
    data = as_json(report)
    assert data["advance"] == {"min_samples": 3, "min_agreement": 0.5}
    row = next(t for t in data["tools"] if t["tool"] == "issue_refund")
    assert row | {"agreement": None} == {
        "channel": "slack",
        "principal_kind": "customer",
        "tool": "issue_refund",
        "unit": "slack/customer/issue_refund",
        "stage": "shadow",
        "next_stage": "assist",
        "proposed": 3,
        "staff_did_same": 2,
        "same_arguments": 1,
        "agreement": None,
        "false_actions": 1,
        "misses": 0,
        "would_need_approval": 0,
        "agent_would_have_moved_minor": {"USD": 10000},
        "staff_moved_minor": {"USD": 7000},
        "verdict": "not yet: agreement 33.3% < 50%",
    }
    # the rep's cancellation of O-1063 came before the agent's proposal, inside the window of C-9's
    # shadow conversation: a miss (and the proposal, which nothing answered, a false action)
    assert (cancels.figures.misses, cancels.figures.false_actions) == (1, 1)
    assert row["agreement"] == pytest.approx(1 / 3, abs=1e-4)


async def test_thresholds_decide_ready_and_the_last_stage(db: Database) -> None:
    await _scripted(db)
    ready = await _report(db, _policy(min_samples=3, min_agreement=0.3))
    assert _tool(ready, "slack", "customer", "issue_refund").verdict == "ready for assist"
    full = await _report(db, policy_with(rollout={"default": "full", "channels": {"slack": {"customer": "full"}}}))
    assert _tool(full, "slack", "customer", "issue_refund").verdict == "at the last stage"
    # the default thresholds (50 samples) are not met by three
    defaults = await _report(
        db, policy_with(rollout={"default": "full", "channels": {"slack": {"customer": "shadow"}}})
    )
    assert _tool(defaults, "slack", "customer", "issue_refund").verdict == "not yet: 3/50 samples"


async def test_a_shadow_surface_with_nothing_recorded_is_reported(db: Database) -> None:
    report = await _report(db, _policy())
    assert [(r.channel, r.kind, r.tool, r.verdict) for r in report.tools] == [
        ("slack", "customer", "-", "not yet: 0/3 samples")
    ]
    assert "(no shadow proposals in the window)" in render(report)


async def test_through_the_runtime_a_recorded_refund_and_the_rep_refunding_another_amount(db: Database) -> None:
    """The real loop: the customer's shadow-stage refund is stored as ``record``; a rep then
    refunds the same order, a different amount, with confirmation: staff did it, not the same."""
    policy = policy_with(
        rollout={"default": "full", "channels": {"slack": {"customer": "shadow"}, "api": {"rep": "full"}}}
    )
    h = await seeded(db, DemoPlanner(), policy=policy)
    c9 = Principal(kind="customer", id="C-9", customer_id="C-9")
    r = await h.runtime.chat(
        principal=c9, channel="slack", message="The tees from O-1061 shrank in the wash, please refund $30."
    )
    assert "recorded" in r.reply.lower()
    rep = Principal(kind="rep", id="S-1", customer_id="C-9")
    r = await h.runtime.chat(
        principal=rep, channel="api", message="The tees from O-1061 shrank in the wash, please refund $25."
    )
    assert r.pending and r.pending[0].kind == "confirmation"
    await h.runtime.chat(principal=rep, channel="api", message="yes", conversation_id=r.conversation_id)
    now = datetime.now(UTC) + timedelta(minutes=1)
    report = await build_report(
        RolloutFacts(db), registry=build_registry(), policy=policy, since=now - timedelta(hours=1), until=now
    )
    row = _tool(report, "slack", "customer", "issue_refund")
    assert (row.figures.proposed, row.figures.staff_did, row.figures.same_args) == (1, 1, 0)


# -- --since -------------------------------------------------------------------------------------

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24h", NOW - timedelta(hours=24)),
        ("7d", NOW - timedelta(days=7)),
        ("90m", NOW - timedelta(minutes=90)),
        ("2w", NOW - timedelta(days=14)),
        ("2026-03-01", datetime(2026, 3, 1, tzinfo=UTC)),
        ("2026-03-01T09:30:00Z", datetime(2026, 3, 1, 9, 30, tzinfo=UTC)),
        ("2026-03-01T09:30:00+02:00", datetime(2026, 3, 1, 7, 30, tzinfo=UTC)),
        ("2026-03-01 09:30", datetime(2026, 3, 1, 9, 30, tzinfo=UTC)),
    ],
)
def test_since_accepts_durations_and_iso_times(text: str, expected: datetime) -> None:
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [("yesterday", "not a duration"), ("7x", "not a duration"), ("", "not a duration"), ("-7d", "not a duration"),
     ("0h", "more than zero"), ("2027-01-01", "in the future")],
)  # fmt: skip
def test_since_refuses_anything_else_clearly(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_since(text, NOW)
    assert says in str(err.value) and "--since" in str(err.value) and "\n" not in str(err.value)


def test_cli_report_text_json_and_a_bad_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key in list(os.environ):
        if key.startswith("SIGNOFF_") and app_setting(key):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        Path(__file__)
        .parents[1]
        .joinpath("agent/data/policy.yaml")
        .read_text()
        .replace("slack: {customer: full,", "slack: {customer: shadow,")
    )
    monkeypatch.setenv("SIGNOFF_POLICY_FILE", str(policy))
    assert main(["db", "upgrade"]) == 0
    capsys.readouterr()
    assert main(["rollout", "report", "--since", "7d"]) == 0
    out = capsys.readouterr().out
    assert "slack/customer/-" in out and "not yet: 0/50 samples" in out
    assert main(["rollout", "report", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tools"][0]["verdict"] == "not yet: 0/50 samples"
    assert main(["rollout", "report", "--since", "last week"]) == 2
    assert "--since 'last week'" in capsys.readouterr().err
