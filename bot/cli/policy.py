"""``signoff policy show|diff|apply|approve`` (the versioned, audited policy); ``signoff rollout`` is
:mod:`bot.cli.rollout`.

Whoever applies or approves is authenticated: a supervisor's JWT (``--token`` or
``SIGNOFF_STAFF_TOKEN``), verified exactly as the HTTP API verifies it (``bot.api.auth``),
for a staff member the store lists as a supervisor. A change to approvers, ceilings or rollout
waits for a second, different supervisor's ``approve``. With the audit signer or key configured,
the ``policy.applied`` event is sealed by it (``bot.signer.policy_trust``), and only a sealed
version is in force."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.errors import ConfigError
from agent.policy import parse_policy
from agent.policy_store import (
    REFRESH_EVERY_S,
    ActivePolicy,
    PolicyRefused,
    active_policy,
    apply_policy,
    approve_policy,
    changes,
    policy_state,
    refusal,
    unified_diff,
)
from bot.cli import rollout as rollout_cli
from bot.settings import Settings, reveal
from bot.signer import policy_trust
from storage.audit import AuditLog
from storage.checkpoints import CheckpointError
from storage.db import Database, create_database
from storage.policies import NewPolicyVersion, PolicyMoved, PolicyVersions
from storage.policy_seal import Sealer

#: Who may apply a policy (a staff member in the store with this role).
APPLIER_ROLE = "supervisor"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``policy show|diff|apply|approve``, and ``rollout report|advance``."""
    pol = sub.add_parser("policy", help="the versioned policy: show the active one, diff or apply a file (audited)")
    pol_sub = pol.add_subparsers(dest="policy_command", required=True)
    show = pol_sub.add_parser("show", help="the active policy: version, source, applied at/by, recent versions")
    show.add_argument("--yaml", action="store_true", help="print the active policy's full YAML text")
    diff = pol_sub.add_parser("diff", help="validate FILE and print what it changes against the active policy")
    diff.add_argument("file", type=Path)
    apply = pol_sub.add_parser(
        "apply",
        help="validate FILE and make it the active policy (a supervisor's token; approvers, ceilings "
        "and rollout changes wait for a second supervisor; audited)",
    )
    apply.add_argument("file", type=Path)
    _token_argument(apply)
    approve = pol_sub.add_parser("approve", help="a second supervisor puts a proposed version in force (audited)")
    approve.add_argument("id", type=int, help="the proposal's policy_versions id (policy show lists them)")
    _token_argument(approve)

    rollout_cli.add_parsers(sub)


def _token_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--token", help="a supervisor's JWT (default: SIGNOFF_STAFF_TOKEN); --as is not accepted")


async def policy_command(settings: Settings, args: argparse.Namespace) -> int:
    db = create_database(settings.signoff_database_url)
    try:
        versions = PolicyVersions(db)
        seal, seal_key = await policy_trust(settings)
        active = await active_policy(versions, settings.signoff_policy_file, seal_key=seal_key)
        if args.policy_command == "show":
            return await _show(versions, active, full=args.yaml)
        if args.policy_command == "diff":
            return _diff(active, args.file)
        if args.policy_command == "approve":
            return await _approve(db, settings, versions, active, args, seal)
        return await _apply(db, settings, versions, active, args, seal)
    finally:
        await db.dispose()


def _describe(active: ActivePolicy) -> str:
    if active.row is None:
        return f"{active.where} (no version applied to the database yet)"
    r = active.row
    return (
        f"database, {active.where}: applied {r.applied_at:%Y-%m-%d %H:%M:%S}Z by {r.applied_by} "
        f"(os user {r.operator}), replacing {r.previous_version or 'the file/bundled policy'}"
    )


async def _show(versions: PolicyVersions, active: ActivePolicy, *, full: bool) -> int:
    if full:
        sys.stdout.write(active.yaml if active.yaml.endswith("\n") else active.yaml + "\n")
        return 0
    print(f"active policy: version {active.policy.version}")
    print(f"  source: {_describe(active)}")
    print(f"  sha256: {active.sha256}")
    rollout = active.policy.rollout
    print(f"  rollout: default {rollout.default}")
    for channel, kinds in sorted(rollout.channels.items()):
        print(f"    {channel}: " + " ".join(f"{kind}={stage}" for kind, stage in kinds.items()))
    adv = rollout.advance
    print(f"  advance: min_samples {adv.min_samples}, min_agreement {adv.min_agreement}")
    pending = (await policy_state(versions, AuditLog(versions.db))).pending
    for r, _event in pending:
        print(
            f"pending approval: #{r.id} version {r.version} proposed by {r.applied_by} (signoff policy approve {r.id})"
        )
    history = await versions.history(limit=10)
    if history:
        print("applied versions (newest first):")
        for r in history:
            at = f"{r.applied_at:%Y-%m-%d %H:%M:%S}Z"
            print(f"  #{r.id}  {r.version:<12} {at}  by {r.applied_by} ({r.operator})  sha256 {r.sha256[:12]}")
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None


def _diff(active: ActivePolicy, path: Path) -> int:
    text = _read(path)
    new = parse_policy(text, source=str(path), setting="")
    delta = changes(active.policy, new)
    print(f"{path}: version {new.version} against the active {active.policy.version} ({active.where})")
    if not delta:
        print("no setting changes" + ("" if text == active.yaml else " (the text differs: comments or layout)"))
    for c in delta:
        print(f"  {c.line()}")
    why = refusal(active, new, text, [], [])
    if why is not None:
        print(f"apply would be refused: {why}")
    patch = unified_diff(active.yaml, text, old_name=f"active ({active.where})", new_name=str(path))
    if patch:
        print()
        sys.stdout.write(patch if patch.endswith("\n") else patch + "\n")
    return 0


async def _supervisor(db: Database, settings: Settings, token: str | None) -> str | None:
    """The authenticated supervisor's staff id, or ``None`` (why is printed)."""
    from bot.api.auth import AuthConfig, Authenticator, AuthError
    from bot.app import build_backend
    from storage.identities import People
    from storage.records import wall_clock as clock

    token = token or reveal(settings.signoff_staff_token)
    if not token:
        print(
            "signoff: a supervisor's token is needed (--token or SIGNOFF_STAFF_TOKEN); nothing applied", file=sys.stderr
        )
        return None
    auth = Authenticator(AuthConfig.from_settings(settings), build_backend(settings, db, clock=clock), People(db))
    try:
        caller = await auth.authenticate(f"Bearer {token}")
    except AuthError as exc:
        print(f"signoff: {exc.message}; nothing applied", file=sys.stderr)
        return None
    if caller.role != APPLIER_ROLE:
        who = caller.principal.id
        print(
            f"signoff: {who} is a {caller.role}; only a {APPLIER_ROLE} may change the policy; nothing applied",
            file=sys.stderr,
        )
        return None
    return caller.principal.id


async def _apply(
    db: Database,
    settings: Settings,
    versions: PolicyVersions,
    active: ActivePolicy,
    args: argparse.Namespace,
    seal: Sealer | None,
) -> int:
    from bot.cli.commands import _operator

    path: Path = args.file
    text = _read(path)
    new = parse_policy(text, source=str(path), setting="")  # a bad file: exit 2, before anything else
    staff_id = await _supervisor(db, settings, args.token)
    if staff_id is None:
        return 1
    pending = NewPolicyVersion(version=new.version, yaml=text, applied_by=staff_id, operator=_operator())
    try:
        done = await apply_policy(versions, active, pending, source=str(path), seal=seal)
    except (PolicyRefused, PolicyMoved, CheckpointError) as exc:
        print(f"signoff: {path}: refused: {exc}; nothing applied", file=sys.stderr)
        return 1
    row = done.row
    verb = "proposed" if done.pending else "applied"
    print(
        f"{verb} policy {row.version} as policy_versions #{row.id} (sha256 {row.sha256[:12]}…), "
        f"replacing {active.policy.version} ({active.where})"
    )
    for c in done.changes:
        print(f"  {c.line()}")
    if done.pending:
        print(
            f"audit event policy.proposed appended (by {row.applied_by}); it changes approvers, ceilings or "
            f"rollout, so it is in force once another supervisor runs `signoff policy approve {row.id}`"
        )
        return 0
    print(
        f"audit event policy.applied appended (by {row.applied_by}, os user {row.operator}); "
        f"running serve/worker processes take it within {REFRESH_EVERY_S:.0f} s"
    )
    return 0


async def _approve(
    db: Database,
    settings: Settings,
    versions: PolicyVersions,
    active: ActivePolicy,
    args: argparse.Namespace,
    seal: Sealer | None,
) -> int:
    from bot.cli.commands import _operator

    staff_id = await _supervisor(db, settings, args.token)
    if staff_id is None:
        return 1
    try:
        row = await approve_policy(versions, active, args.id, approver=staff_id, operator=_operator(), seal=seal)
    except (PolicyRefused, PolicyMoved, CheckpointError) as exc:
        print(f"signoff: refused: {exc}; nothing applied", file=sys.stderr)
        return 1
    print(
        f"approved policy {row.version} (policy_versions #{row.id}, proposed by {row.applied_by}) by {staff_id}: "
        f"in force now; running serve/worker processes take it within {REFRESH_EVERY_S:.0f} s"
    )
    return 0
