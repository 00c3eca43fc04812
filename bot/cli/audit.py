"""``signoff audit verify|checkpoint|signer``: the chain, its anchors, and the separate signer.

An anchor is what a tampered log cannot also rewrite: a checkpoint file, and the signer's own
history (its highest seq). ``verify`` fails when a configured anchor is missing or empty, and
on an empty log unless ``--allow-empty`` says one is expected.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bot.settings import Settings
from storage.checkpoints import Checkpoint, CheckpointError


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``audit verify|checkpoint|signer``."""
    audit = sub.add_parser("audit", help="the audit chain")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True)
    verify = audit_sub.add_parser(
        "verify",
        help="exit 0 and a count when the chain holds (and every anchored head is still in it); else exit 1",
    )
    verify.add_argument(
        "--checkpoint",
        type=Path,
        help="checkpoint file to verify against (default: SIGNOFF_AUDIT_CHECKPOINT_FILE, else the default if present)",
    )
    verify.add_argument("--signer", help="the audit signer to verify against (default: SIGNOFF_AUDIT_SIGNER)")
    verify.add_argument("--allow-empty", action="store_true", help="an empty log is expected (a fresh database)")
    checkpoint = audit_sub.add_parser(
        "checkpoint",
        help="sign the current head (the signer, else the Ed25519 key file) and append it to a checkpoint file",
    )
    checkpoint.add_argument("--out", type=Path, help="checkpoint file (default: SIGNOFF_AUDIT_CHECKPOINT_FILE)")
    checkpoint.add_argument("--signer", help="the audit signer's URL (default: SIGNOFF_AUDIT_SIGNER)")
    checkpoint.add_argument("--publish", help="also send it off-host: an http(s) URL or a WORM directory")
    signer = audit_sub.add_parser(
        "signer", help="run the audit signer (as its own OS user): signs heads in seq order only, never backwards"
    )
    signer.add_argument("--key", type=Path, required=True, help="its Ed25519 key file (created 0600 on first use)")
    signer.add_argument("--state", type=Path, required=True, help="its state file: every head it signed")
    signer.add_argument("--listen", required=True, help="unix:/PATH or http://127.0.0.1:PORT")


async def audit_command(settings: Settings, args: argparse.Namespace) -> int:
    """Run one ``audit`` subcommand."""
    try:
        if args.audit_command == "checkpoint":
            return await _checkpoint(settings, args)
        return await _verify(settings, args)
    except CheckpointError as exc:
        print(f"signoff: {exc}", file=sys.stderr)
        return 1


def run_signer_command(args: argparse.Namespace) -> int:
    """``signoff audit signer``: needs no database and no app settings (it runs apart)."""
    from bot.signer import listen_address, run_signer
    from storage.checkpoints import load_or_create_signing_key
    from storage.signer import Signer

    try:
        listen_address(args.listen)
        signer = Signer.open(load_or_create_signing_key(args.key), args.state)
    except CheckpointError as exc:
        print(f"signoff: {exc}", file=sys.stderr)
        return 1
    top = signer.highest
    print(
        f"audit signer on {args.listen}: key {args.key}, state {args.state} "
        f"(highest seq signed: {top.seq if top else 'none'})",
        flush=True,
    )
    try:
        asyncio.run(run_signer(signer, args.listen))
    except KeyboardInterrupt:
        return 0
    return 0


async def _checkpoint(settings: Settings, args: argparse.Namespace) -> int:
    from bot.signer import RemoteSigner, publisher
    from storage import checkpoints
    from storage.audit import AuditLog
    from storage.db import create_database

    path = args.out or settings.audit_checkpoint_path
    signer_url = args.signer if args.signer is not None else settings.signoff_audit_signer
    target = args.publish if args.publish is not None else settings.signoff_audit_publish
    db = create_database(settings.signoff_database_url)
    try:
        cp = await checkpoints.take(
            AuditLog(db),
            key_file=settings.audit_key_path,
            signer=RemoteSigner(signer_url) if signer_url else None,
            publish=[publisher(target)] if target else [],
            checkpoint_file=path,
        )
    finally:
        await db.dispose()
    assert cp is not None
    by = f"the signer at {signer_url}" if signer_url else str(settings.audit_key_path)
    print(f"checkpoint: seq {cp.seq} hash {cp.hash[:16]}… signed with key {cp.key_id} ({by}), appended to {path}")
    if target:
        print(f"published to {target}")
    return 0


async def _anchors(settings: Settings, args: argparse.Namespace) -> list[tuple[str, Sequence[Checkpoint]]]:
    """Every configured anchor's checkpoints; a configured one that is missing or empty raises.
    With a signer, the checkpoint file is checked against the signer's key (it signed them)."""
    from bot.signer import RemoteSigner
    from storage import checkpoints

    sources: list[tuple[str, Sequence[Checkpoint]]] = []
    signer_url = args.signer if args.signer is not None else settings.signoff_audit_signer
    signer = RemoteSigner(signer_url) if signer_url else None
    if signer is not None:
        pinned = await _pinned_key(settings) if settings.signoff_audit_key_file else None
        if pinned is not None and checkpoints.key_id(pinned) != checkpoints.key_id(await signer.public_key()):
            raise CheckpointError(f"the signer at {signer_url} does not sign with SIGNOFF_AUDIT_KEY_FILE's key")
        history = await signer.history()
        if not history:
            raise CheckpointError(f"the audit signer at {signer_url} has signed nothing yet (no anchor)")
        sources.append((f"signer {signer_url}", history))
    configured = args.checkpoint or settings.signoff_audit_checkpoint_file
    path = configured or settings.audit_checkpoint_path
    if configured is None and not path.exists():
        return sources
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint file (a configured anchor is missing)")
    key = await signer.public_key() if signer is not None else await _pinned_key(settings)
    found = await asyncio.to_thread(checkpoints.read_all, path, key)
    if not found:
        raise CheckpointError(f"{path}: the checkpoint file is empty (a configured anchor was emptied)")
    return [(str(path), found), *sources]


async def _pinned_key(settings: Settings) -> Ed25519PublicKey:
    """The configured audit key's public half (the signer's ``key.pem.pub`` on the app host)."""
    from storage import checkpoints

    return await asyncio.to_thread(checkpoints.load_verify_key, settings.audit_key_path)


async def _verify(settings: Settings, args: argparse.Namespace) -> int:
    from storage import checkpoints
    from storage.audit import AuditLog
    from storage.db import create_database

    db = create_database(settings.signoff_database_url)
    try:
        sources = await _anchors(settings, args)
        result = await checkpoints.verify_anchored(AuditLog(db), sources)
    except CheckpointError as exc:
        print(f"audit checkpoints BROKEN: {exc}", file=sys.stderr)
        return 1
    finally:
        await db.dispose()
    if not result.ok:
        # The reason names the partition when it is not the root.
        print(f"audit chain BROKEN at seq {result.broken_seq}: {result.reason}", file=sys.stderr)
        return 1
    if result.count == 0 and not args.allow_empty:
        print("audit chain BROKEN: the log is empty (pass --allow-empty when that is expected)", file=sys.stderr)
        return 1
    count = sum(len(found) for _, found in sources)
    against = f" and {count} checkpoints in {', '.join(name for name, _ in sources)}" if sources else " (no anchors)"
    print(f"audit chain verified: {result.count} events{against}")
    return 0
