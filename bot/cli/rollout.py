"""``signoff rollout report`` (shadow proposals against what staff did) and ``signoff rollout
advance --unit U`` (the policy diff that moves one unit a stage on, for a supervisor to apply)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agent.policy_store import active_policy, unified_diff
from bot.settings import Settings
from bot.signer import policy_trust
from storage.db import create_database
from storage.policies import PolicyVersions
from storage.records import wall_clock


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``rollout report`` and ``rollout advance``."""
    rollout = sub.add_parser("rollout", help="rollout stages (C16)")
    rollout_sub = rollout.add_subparsers(dest="rollout_command", required=True)
    report = rollout_sub.add_parser(
        "report",
        help="shadow proposals vs what staff did (in signoff and in the shop's admin), per intent, unit "
        "and amount band: agreement, false actions, misses, money, escalations, and the stage thresholds",
    )
    report.add_argument("--since", default="30d", help="a duration (90m, 24h, 7d, 2w) or an ISO date/time; default 30d")
    report.add_argument(
        "--window", default="24h", help="how long after a proposal a staff action still answers it; default 24h"
    )
    report.add_argument("--json", action="store_true", help="the report as JSON (details included)")
    report.add_argument(
        "--details",
        action="store_true",
        help="each proposal with its conversation id, the staff action matched and the fields that differ; each miss",
    )
    adv = rollout_sub.add_parser(
        "advance", help="print the policy diff that moves one unit a stage on (apply it with `signoff policy apply`)"
    )
    adv.add_argument(
        "--unit",
        required=True,
        help="CHANNEL/KIND or CHANNEL/KIND/TOOL, as the report names it (api/customer/issue_refund)",
    )
    adv.add_argument("--out", type=Path, help="write the new policy to FILE (for `signoff policy apply FILE`)")


async def rollout_command(settings: Settings, args: argparse.Namespace) -> int:
    if args.rollout_command == "advance":
        return await _advance(settings, args)
    from agent.rollout import build_report, parse_since
    from agent.rollout_compare import parse_duration
    from agent.rollout_render import as_json, render
    from storage.rollout import RolloutFacts
    from tools.catalogue import build_registry

    now = wall_clock()
    since = parse_since(args.since, now)
    window = parse_duration(args.window, option="--window")
    db = create_database(settings.signoff_database_url)
    try:
        active = await active_policy(
            PolicyVersions(db), settings.signoff_policy_file, seal_key=(await policy_trust(settings))[1]
        )
        report = await build_report(
            RolloutFacts(db), registry=build_registry(), policy=active.policy, since=since, until=now, window=window
        )
    finally:
        await db.dispose()
    if args.json:
        print(json.dumps(as_json(report), indent=2))
    else:
        sys.stdout.write(render(report, details=args.details))
    return 0


async def _advance(settings: Settings, args: argparse.Namespace) -> int:
    from agent.rollout_advance import advance

    db = create_database(settings.signoff_database_url)
    try:
        active = await active_policy(
            PolicyVersions(db), settings.signoff_policy_file, seal_key=(await policy_trust(settings))[1]
        )
    finally:
        await db.dispose()
    moved = advance(active.policy, active.yaml, args.unit, wall_clock().date())
    print(f"{moved.unit}: {moved.old} -> {moved.new} (policy {active.policy.version} -> {moved.policy.version})")
    for c in moved.changes:
        print(f"  {c.line()}")
    out = str(args.out) if args.out else "policy.yaml"
    patch = unified_diff(active.yaml, moved.text, old_name=f"active ({active.where})", new_name=out)
    print()
    sys.stdout.write(patch if patch.endswith("\n") else patch + "\n")
    if args.out:
        args.out.write_text(moved.text, encoding="utf-8")
        print(f"wrote {args.out}; a supervisor applies it: signoff policy apply {args.out} --token JWT")
        print("(a rollout change: in force once a second supervisor runs `signoff policy approve ID`)")
    return 0
