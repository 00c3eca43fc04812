"""The operator's CLI: ``main(argv) -> int`` so tests call it directly.

Sync exists only here (``asyncio.run``); every command is a thin layer over the
runtime, the repositories or the store.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeAlias

from agent.errors import Busy, ConfigError, DecisionError
from bot.settings import Settings, load_settings, reveal

#: What ``add_subparsers`` returns (one per command group).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="signoff", description="A support agent whose model proposes and whose code decides."
    )
    sub = p.add_subparsers(dest="command", required=True)
    _run_commands(sub)
    _data_commands(sub)
    _approval_commands(sub)
    from bot.cli import audit, policy

    audit.add_parsers(sub)

    policy.add_parsers(sub)
    _tooling_commands(sub)
    return p


def _run_commands(sub: Subparsers) -> None:
    """``demo``, ``serve``, ``worker``."""
    demo = sub.add_parser("demo", help="run the canonical scenarios on a temporary SQLite store")
    demo.add_argument("--live", action="store_true", help="drive the demo with the configured model")
    demo.add_argument(
        "--slack",
        action="store_true",
        help="the rep-assist and approval scenario through the Slack app, as people see it",
    )
    demo.add_argument("--widget", action="store_true", help="serve a demo storefront with the chat widget")
    demo.add_argument("--port", type=int, default=8765, help="the widget demo's port")

    serve = sub.add_parser("serve", help="HTTP: /api/*, /email/inbound, /metrics, /healthz")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--no-worker", action="store_true", help="do not run the resume/expiry worker in-process")
    serve.add_argument(
        "--metrics-port", type=int, help="serve /metrics only on this port (same host), not on the main one"
    )

    worker = sub.add_parser("worker", help="the resume/expiry worker alone")
    worker.add_argument("--host", default="127.0.0.1", help="the address of its /metrics listener, if any")
    worker.add_argument(
        "--metrics-port", type=int, help="serve /metrics (and /healthz) on this port (else SIGNOFF_METRICS_PORT)"
    )
    sub.add_parser("socket", help="the Slack app over Socket Mode (SLACK_APP_TOKEN), with the worker")


def _data_commands(sub: Subparsers) -> None:
    """``db upgrade``, ``store load|export|admin``."""
    db = sub.add_parser("db", help="database migrations")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_sub.add_parser(
        "upgrade",
        help="Alembic migrations to head (as SIGNOFF_MIGRATION_DATABASE_URL when set, "
        "then the application's PostgreSQL role is granted what it needs)",
    )

    store = sub.add_parser("store", help="the sandbox store")
    store_sub = store.add_subparsers(dest="store_command", required=True)
    load = store_sub.add_parser("load", help="load a dataset into an empty store")
    load.add_argument("file", type=Path)
    load.add_argument(
        "--rebase-to-now",
        action="store_true",
        help="shift every time so the dataset's as_of is now (keeps demo data recent)",
    )
    export = store_sub.add_parser("export", help="the store's current state in the dataset format")
    export.add_argument("--out", type=Path)
    from bot.cli import store_admin

    store_admin.add_parser(store_sub)


def _approval_commands(sub: Subparsers) -> None:
    """``approvals list|show|approve|reject``."""
    ap = sub.add_parser("approvals", help="list, show and decide approvals")
    ap_sub = ap.add_subparsers(dest="approvals_command", required=True)
    ls = ap_sub.add_parser("list")
    ls.add_argument(
        "--status", default="pending", choices=["pending", "approved", "rejected", "expired", "superseded", "all"]
    )
    show = ap_sub.add_parser("show")
    show.add_argument("id")
    for verb in ("approve", "reject"):
        d = ap_sub.add_parser(verb)
        d.add_argument("id")
        d.add_argument("--as", dest="staff_id", required=True, help="the deciding staff member's id")
        d.add_argument("--comment")
        d.add_argument("--version", type=int, help="expected version (default: the current one)")


def _tooling_commands(sub: Subparsers) -> None:
    """``eval``, ``token``."""
    ev = sub.add_parser("eval", help="run evaluation suites")
    ev.add_argument("suites", nargs="*")
    ev.add_argument("--model", default="scripted")
    ev.add_argument("--runs", type=int, default=3)
    ev.add_argument("--json", dest="json_out", type=Path, help="also write the report as JSON")
    ev.add_argument("--replay", type=Path, help="replay a .traces.jsonl with --model and print tool-sequence diffs")
    ev.add_argument("--record", type=Path, help="write this run's tool selections as JSON lines")
    ev.add_argument("--workers", type=int, help="worker processes for offline models (default: CPUs, max 4)")

    from bot.cli import jobs, knowledge, teams

    teams.add_parser(sub)
    jobs.add_parser(sub)
    knowledge.add_parser(sub)
    from bot.cli import shopify

    shopify.add_parser(sub)

    tok = sub.add_parser("token", help="a development JWT (HS256 with SIGNOFF_JWT_SECRET) for a person in the store")
    tok.add_argument("--sub", required=True)
    tok.add_argument("--role", required=True, choices=["customer", "rep", "supervisor"])
    tok.add_argument("--customer")
    tok.add_argument("--ttl", type=int, default=3600, help="seconds (at most SIGNOFF_JWT_MAX_TTL_S)")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "audit" and args.audit_command == "signer":
        from bot.cli.audit import run_signer_command

        return run_signer_command(args)  # apart from the app: no settings, no database
    try:
        return asyncio.run(_dispatch(args))
    except ConfigError as exc:
        print(f"signoff: {exc}", file=sys.stderr)
        return 2
    except Busy as exc:  # e.g. an approval's action waited too long for the customer's money lock
        print(f"signoff: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo" and args.slack:
        from bot.cli.slack_demo import run_slack_demo

        return await run_slack_demo()
    if args.command == "demo" and args.widget:
        from bot.widget.demo import run_widget_demo

        return await run_widget_demo(port=args.port)
    if args.command == "demo":
        from bot.cli.demo import run_demo

        return await run_demo(live=args.live)
    settings = load_settings()
    match args.command:
        case "db":
            return await _db_upgrade(settings)
        case "store":
            return await _store(settings, args)
        case "approvals":
            return await _approvals(settings, args)
        case "audit":
            from bot.cli.audit import audit_command

            return await audit_command(settings, args)
        case "token":
            return await _token(settings, args)
        case "policy" | "rollout":
            from bot.cli.policy import policy_command
            from bot.cli.rollout import rollout_command

            return await (policy_command if args.command == "policy" else rollout_command)(settings, args)
        case "teams" | "jobs" | "knowledge" | "shopify":
            return await _operations(settings, args)
        case "serve":
            settings.require_model("serve")
            return await _serve(settings, args)
        case "worker":
            settings.require_model("worker")
            return await _worker(settings, args)
        case "socket":
            return await _socket(settings)
        case "eval":
            return await _eval(settings, args)
    raise AssertionError(args.command)


async def _eval(settings: Settings, args: argparse.Namespace) -> int:
    """``signoff eval``: on the sandbox, or (``SIGNOFF_BACKEND=shopify``) on a store reset per case."""
    from agent.evaluation.runner import run_cli

    shops = None
    if settings.signoff_backend == "shopify":
        from bot.shopify.evaluation import ShopifyShops

        shops = ShopifyShops([settings.shopify_config()])
    try:
        return await run_cli(
            suites=args.suites,
            model=args.model,
            runs=args.runs,
            json_out=args.json_out,
            settings=settings,
            record=args.record,
            replay=args.replay,
            workers=args.workers,
            shops=shops,
        )
    finally:
        if shops is not None:
            await shops.aclose()


async def _operations(settings: Settings, args: argparse.Namespace) -> int:
    """``teams manifest``, ``jobs``, ``knowledge`` and ``shopify check|webhooks install``."""
    if args.command == "jobs":
        from bot.cli.jobs import jobs_command

        return await jobs_command(settings, args)
    if args.command == "knowledge":
        from bot.cli import knowledge

        return await knowledge.run(settings, args)
    if args.command == "shopify":
        from bot.cli import shopify

        return await shopify.run(settings, args)
    from bot.cli import teams

    return teams.manifest(settings, args)


async def _db_upgrade(settings: Settings) -> int:
    from sandbox.schema import upgrade
    from storage.roles import grant_app_role, role_of

    app_url = settings.signoff_database_url
    owner_url = settings.signoff_migration_database_url or app_url
    await upgrade(owner_url)
    print(f"database at head: {_redact(owner_url)}")
    if not app_url.startswith("postgresql"):
        return 0
    app_role, owner_role = role_of(app_url), role_of(owner_url)
    if app_role is None or app_role == owner_role:
        print(
            "signoff: warning: the application connects as the role that owns the audit tables, so it could "
            "disable their guards; set SIGNOFF_MIGRATION_DATABASE_URL to an owner role (README: Deployment on "
            "PostgreSQL)",
            file=sys.stderr,
        )
        return 0
    await grant_app_role(owner_url, app_role)
    print(
        f"granted {app_role} the application's privileges (audit_events: SELECT, INSERT; "
        "audit_head: SELECT, UPDATE (seq, hash))"
    )
    return 0


async def _store(settings: Settings, args: argparse.Namespace) -> int:
    from sandbox.dataset import DatasetError, load_dataset_file
    from sandbox.io import StoreLoadError, export_dataset, load_dataset
    from storage.db import create_database

    db = create_database(settings.signoff_database_url)
    try:
        if args.store_command == "admin":
            from bot.cli.store_admin import admin_command

            return await admin_command(settings, db, args)
        if args.store_command == "load":
            try:
                dataset = load_dataset_file(args.file)
                from datetime import UTC, datetime

                report = await load_dataset(
                    db,
                    dataset,
                    rebase_to=datetime.now(UTC) if args.rebase_to_now else None,
                    people=settings.signoff_people_file is None,  # the people file is in charge of people
                )
            except DatasetError as exc:
                print(f"signoff: {args.file}: invalid dataset", file=sys.stderr)
                for line in exc.errors[:50]:
                    print(f"  {line}", file=sys.stderr)
                return 1
            except StoreLoadError as exc:
                print(f"signoff: {exc}", file=sys.stderr)
                return 1
            print(f"loaded {args.file}: {_counts(report)}")
            return 0
        data = await export_dataset(db)
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        if args.out:
            args.out.write_text(text, encoding="utf-8")
            print(f"exported to {args.out}")
        else:
            sys.stdout.write(text)
        return 0
    finally:
        await db.dispose()


def _counts(report: Any) -> str:
    import dataclasses

    if dataclasses.is_dataclass(report):
        fields = dataclasses.asdict(report)  # type: ignore[arg-type]
        shifted = fields.pop("shifted_by", None)
        text = ", ".join(f"{v} {k}" for k, v in fields.items())
        return text + (f" (times shifted by {shifted})" if shifted else "")
    return str(report)


async def _approvals(settings: Settings, args: argparse.Namespace) -> int:
    from bot.app import create_app
    from tools.context import Principal

    app = await create_app(settings, seed=False)
    try:
        approvals = app.services.approvals
        if args.approvals_command == "list":
            rows = await approvals.list_approvals(status=None if args.status == "all" else args.status)
            if not rows:
                print(f"no {args.status} approvals")
            for row in rows:
                print(
                    f"{row.id}  v{row.version}  {row.status:<10} {row.required_role:<10} "
                    f"expires {row.expires_at:%Y-%m-%d %H:%M}Z  {row.summary}"
                )
            return 0
        a = await approvals.get(args.id)
        if a is None:
            print(f"signoff: no approval {args.id}", file=sys.stderr)
            return 1
        if args.approvals_command == "show":
            print(json.dumps(a.as_public(), indent=2, ensure_ascii=False, default=str))
            return 0
        staff = await app.port.staff(args.staff_id)
        if staff is None:
            print(f"signoff: no staff member {args.staff_id}", file=sys.stderr)
            return 1
        actor = Principal(kind=staff.role, id=staff.id)
        try:
            out = await app.runtime.decide(
                a.id,
                expected_version=args.version or a.version,
                decision=args.approvals_command,
                actor=actor,
                comment=args.comment,
                via={"surface": "cli", "operator": _operator(), "as": staff.id},
            )
        except DecisionError as exc:
            print(f"signoff: {exc.code}: {exc}", file=sys.stderr)
            return 1
        print(f"{out.approval.id} is {out.approval.status} (version {out.approval.version})")
        if out.result is not None:
            print(json.dumps(out.result, indent=2, ensure_ascii=False, default=str))
        return 0
    finally:
        await app.close()


async def _token(settings: Settings, args: argparse.Namespace) -> int:
    """A development helper: mints only for people in the store, with their role, for a bounded time."""
    secret = reveal(settings.signoff_jwt_secret)
    if not secret:
        raise ConfigError("SIGNOFF_JWT_SECRET: required to mint a development token")
    if settings.is_production and args.role != "customer":
        raise ConfigError(
            "SIGNOFF_ENV: production; staff tokens come from your identity provider (SIGNOFF_JWKS_URL), "
            "the shared secret mints customer tokens only"
        )
    print("signoff token: a development helper; in production tokens come from your identity provider", file=sys.stderr)
    max_ttl = settings.signoff_jwt_max_ttl_s
    if not 0 < args.ttl <= max_ttl:
        print(f"signoff: --ttl must be between 1 and {max_ttl} seconds (SIGNOFF_JWT_MAX_TTL_S)", file=sys.stderr)
        return 2
    if args.role == "customer" and args.customer and args.customer != args.sub:
        print("signoff: a customer's token is for their own account (--customer must equal --sub)", file=sys.stderr)
        return 2
    refusal = await _token_refusal(settings, args)
    if refusal:
        print(f"signoff: {refusal}", file=sys.stderr)
        return 2
    from bot.api.auth import make_token

    print(
        make_token(
            secret,
            sub=args.sub,
            role=args.role,
            customer=args.customer,
            ttl_s=args.ttl,
            audience=settings.signoff_jwt_audience,
            issuer=settings.signoff_jwt_issuer,
        )
    )
    return 0


async def _token_refusal(settings: Settings, args: argparse.Namespace) -> str | None:
    """Why the store does not back this token (``None``: it does)."""
    from bot.app import build_backend
    from storage.db import create_database
    from storage.identities import People
    from storage.records import wall_clock

    db = create_database(settings.signoff_database_url)
    store = build_backend(settings, db, clock=wall_clock)  # the sandbox, or the Shopify store
    try:
        try:
            if args.role == "customer":
                if await store.get_customer(args.sub) is None:
                    return f"no customer {args.sub} in the store; refusing to mint a token for them"
                return None
            staff = await People(db).staff(args.sub)
            if staff is None:
                return f"no staff member {args.sub} in the store; refusing to mint a {args.role} token"
            if staff.role != args.role:
                return f"{args.sub} is a {staff.role} in the store, not a {args.role}; refusing"
            if args.customer and await store.get_customer(args.customer) is None:
                return f"no customer {args.customer} in the store (--customer)"
            return None
        except Exception as exc:  # the store's tables are missing
            raise ConfigError(
                f"SIGNOFF_DATABASE_URL: cannot read the store ({type(exc).__name__}); "
                "run `signoff db upgrade` and load a dataset"
            ) from None
    finally:
        close = getattr(getattr(store, "client", None), "close", None)
        if close is not None:
            await close()
        await db.dispose()


async def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from bot.app import create_app
    from bot.logging import configure_logging
    from bot.production import refuse_public_listen
    from bot.server import serve

    refuse_public_listen(settings, args.host)
    configure_logging(json=True)
    listen = (args.host, args.metrics_port) if args.metrics_port else settings.metrics_listen(args.host)
    app = await create_app(settings)
    stop = asyncio.Event()
    refresher = asyncio.create_task(app.policy_refresher().run(stop), name="signoff-policy")
    try:
        await serve(
            app,
            host=args.host,
            port=args.port,
            worker=not args.no_worker,
            metrics_render=app.metrics.render if app.metrics else None,
            metrics_listen=listen,
            stop=stop,
        )
    finally:
        stop.set()
        await refresher
        await app.close()
    return 0


async def _socket(settings: Settings) -> int:
    from bot.app import create_app
    from bot.logging import configure_logging
    from bot.server import settle_heap
    from bot.slack.socket import run_socket

    if not (settings.slack_bot_token and settings.slack_app_token):
        raise ConfigError("SLACK_APP_TOKEN: required for `signoff socket` (with SLACK_BOT_TOKEN)")
    settings.require_model("socket")
    configure_logging(json=True)
    app = await create_app(settings)
    settle_heap()
    stop = asyncio.Event()
    refresher = asyncio.create_task(app.policy_refresher().run(stop), name="signoff-policy")
    try:
        await run_socket(app)
    finally:
        stop.set()
        await refresher
        await app.close()
    return 0


async def _worker(settings: Settings, args: argparse.Namespace) -> int:
    import signal

    from bot.app import create_app
    from bot.logging import configure_logging
    from bot.server import settle_heap, start_metrics

    listen = (args.host, args.metrics_port) if args.metrics_port else settings.metrics_listen(args.host)
    configure_logging(json=True)
    app = await create_app(settings)
    settle_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    refresher = asyncio.create_task(app.policy_refresher().run(stop), name="signoff-policy")
    metrics = None
    try:
        if listen is not None and app.metrics is not None:  # its passes' figures, scraped from it
            metrics = await start_metrics(app, app.metrics.render, listen)
        await app.worker().run_forever(stop)
    finally:
        stop.set()
        await refresher
        if metrics is not None:
            await metrics.cleanup()
        await app.close()
    return 0


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


if __name__ == "__main__":
    raise SystemExit(main())


def _operator() -> str:
    """The operating-system user running the CLI (recorded with CLI decisions)."""
    try:
        return getpass.getuser()[:64]
    except (OSError, KeyError):
        return "unknown"
