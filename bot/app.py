"""The composition root: the only place real clients are built from settings."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agent import handoff
from agent.errors import ConfigError
from agent.face_port import FacePort
from agent.handoff_relay import Relay, run_job
from agent.llm.base import ModelClient
from agent.metrics import InstrumentedModel, Metrics, attach_metrics
from agent.notify import LogNotifier, Notifier, RoutingNotifier
from agent.people import load_people_file
from agent.policy import Policy
from agent.policy_refresher import PolicyRefresher
from agent.policy_store import REFRESH_EVERY_S, ActivePolicy, active_policy, start_text
from agent.policy_versions import record_start
from agent.runtime import Runtime
from agent.services import Services, build_services
from agent.tracing import TracedModel
from agent.worker import Worker, WorkerConfig
from bot.api import wiring as api_wiring
from bot.email import wiring as email_wiring
from bot.email.smtp import Mailer
from bot.faces import Face, FaceFactory, FaceKit
from bot.production import warn_if_development
from bot.settings import Settings, reveal
from bot.shopify import wiring as shopify_wiring
from bot.signer import policy_trust
from bot.slack import wiring as slack_wiring
from bot.teams import wiring as teams_wiring
from bot.telemetry import Tracing, install_tracing
from bot.widget import wiring as widget_wiring
from sandbox import schema
from sandbox.store import SandboxStore, store_is_empty
from storage import checkpoints
from storage.checkpoints import Checkpoint
from storage.db import Database, create_database
from storage.faults import rerunnable
from storage.identities import PeopleSeed
from storage.inbox import INBOUND_JOB, Inbound
from storage.jobs import Job
from storage.mailbox import SentMail
from storage.policies import PolicyVersions
from storage.records import wall_clock

if TYPE_CHECKING:
    from bot.slack.face import SlackFace
    from shopify.config import ShopifyConfig
    from shopify.messages import MessageSender
    from shopify.writes import ShopifyBackend
from tools.backend import CommerceBackend
from tools.catalogue import build_registry

log = logging.getLogger(__name__)

#: A face's worker side: run the turn of one accepted message and deliver its reply.
InboundHandler = Callable[[Inbound], Awaitable[None]]


def sandbox_services(
    *,
    db: Database,
    model: ModelClient,
    policy: Policy | None = None,
    notifier: Notifier | None = None,
    clock: Callable[[], datetime] | None = None,
) -> Services:
    """The runtime's collaborators with the sandbox store as the shop (this deployment's choice)."""
    clock = clock or wall_clock
    return build_services(
        db=db, model=model, backend=SandboxStore(db, clock=clock), policy=policy, notifier=notifier, clock=clock
    )


def demo_dataset_path() -> Path:
    return Path(str(resources.files("sandbox").joinpath("data/demo.json")))


def build_model(settings: Settings, metrics: Metrics | None = None) -> ModelClient:
    """The configured model client. ``scripted`` is the demo planner (no network).

    The vendor SDK retries (``SIGNOFF_MODEL_MAX_RETRIES``, each attempt bounded by
    ``SIGNOFF_MODEL_TIMEOUT_S``); the whole call is bounded by ``SIGNOFF_MODEL_DEADLINE_S``;
    the breaker's state goes to ``metrics``.
    """
    from agent.llm.breaker import CircuitBreaker

    provider = settings.provider
    on_change = metrics.breaker_callback(provider) if metrics else None
    breaker = CircuitBreaker(name=f"{provider}:{settings.signoff_model}", on_change=on_change)
    sending: dict[str, Any] = {
        "timeout_s": settings.signoff_model_timeout_s,
        "max_retries": settings.signoff_model_max_retries,
        "deadline_s": settings.signoff_model_deadline_s,
    }
    if provider == "anthropic":
        from agent.llm.anthropic import AnthropicClient, AnthropicConfig

        return AnthropicClient(
            AnthropicConfig(
                model=settings.signoff_model,
                api_key=reveal(settings.anthropic_api_key) or "",
                base_url=settings.anthropic_base_url,
                **sending,
            ),
            breaker=breaker,
        )
    if provider == "openai":
        from agent.llm.openai_compat import OpenAICompatClient, OpenAIConfig

        assert settings.openai_base_url
        return OpenAICompatClient(
            OpenAIConfig(
                model=settings.signoff_model,
                base_url=settings.openai_base_url,
                api_key=reveal(settings.openai_api_key),
                **sending,
            ),
            breaker=breaker,
        )
    from agent.planner import DemoPlanner

    return DemoPlanner()


@dataclass(frozen=True, kw_only=True)
class App:
    settings: Settings | None
    db: Database
    runtime: Runtime
    backend: CommerceBackend
    notifier: Notifier
    metrics: Metrics | None = None
    #: Set when OTEL_EXPORTER_OTLP_ENDPOINT asked for export; None means tracing is off.
    tracing: Tracing | None = None
    #: The one SMTP client (email replies and follow-ups), when SIGNOFF_SMTP_URL is set.
    mailer: Mailer | None = None
    #: Each face's handler of the messages it accepted (``Inbox.accept(face, …)``), by face.
    inbound: Mapping[str, InboundHandler] = field(default_factory=dict)
    #: The Slack face, when SLACK_BOT_TOKEN (or the OAuth client) is set.
    slack: SlackFace | None = None
    #: Every face this process runs (``FACES``, those configured), closed with the app.
    faces: tuple[Face, ...] = ()
    #: HTTP routes the faces built (Teams: ``POST /teams/messages``); the server mounts them.
    http_routes: tuple[web.AbstractRouteDef, ...] = ()
    #: The policy in force at start and where it came from (the database's newest applied
    #: version wins over the file); :meth:`policy_refresher` picks up later applies.
    policy: ActivePolicy | None = None
    #: The audit key every ``policy.applied`` must be sealed by (``None``: none configured).
    policy_seal_key: Ed25519PublicKey | None = None
    #: Where a hand-off's relayed messages go: each face's customers and staff threads (one line a face).
    relay: Relay = field(default_factory=Relay)

    @property
    def port(self) -> FacePort:
        """What a face holds of the runtime (faces never see :attr:`services`)."""
        return FacePort(self.runtime)

    @property
    def services(self) -> Services:
        """The runtime's repositories, for the operator's commands (CLI, ``/metrics``), never a face."""
        return self.runtime.s

    async def close(self) -> None:
        # Outcomes of done side effects still being recorded get a last chance before the engine goes.
        await self.runtime.s.executor.drain(timeout_s=10.0)
        for face in self.faces:
            await face.close()
        if self.settings is not None and self.settings.signoff_backend == "shopify":
            from shopify.writes import ShopifyBackend

            assert isinstance(self.backend, ShopifyBackend)
            await self.backend.client.close()
        await self.db.dispose()
        if self.tracing is not None:
            await self.tracing.flush()

    async def audit_checkpoint(self, *, skip_if_unchanged: bool = False) -> Checkpoint | None:
        """Sign the audit head into the configured checkpoint file (``signoff audit checkpoint``)."""
        assert self.settings is not None
        from bot.signer import RemoteSigner, publisher

        s = self.settings
        return await checkpoints.take(
            self.runtime.s.audit,
            key_file=s.audit_key_path,
            signer=RemoteSigner(s.signoff_audit_signer) if s.signoff_audit_signer else None,
            publish=[publisher(s.signoff_audit_publish)] if s.signoff_audit_publish else [],
            checkpoint_file=s.audit_checkpoint_path,
            skip_if_unchanged=skip_if_unchanged,
        )

    def policy_refresher(self, every_s: float = REFRESH_EVERY_S) -> PolicyRefresher:
        """What keeps a long-running process (serve, worker, socket) on the newest applied policy:
        run it beside the process (``await refresher.run(stop)``)."""
        row = self.policy.row if self.policy is not None else None
        path = self.settings.signoff_policy_file if self.settings is not None else None
        return PolicyRefresher(
            PolicyVersions(self.db),
            self.runtime.s.use_policy,
            seen_id=row.id if row is not None else None,
            every_s=every_s,
            seal_key=self.policy_seal_key,
            start=start_text(path),
        )

    def worker(self) -> Worker:
        """The worker: resume and expiry, the faces' accepted messages, and audit checkpoints
        on the configured schedule."""
        handlers = {INBOUND_JOB: self.handle_inbound, **{kind: self.handle_handoff for kind in handoff.JOB_KINDS}}
        s = self.settings
        every = s.checkpoint_every_s if s is not None else None
        config = WorkerConfig(checkpoint_every_s=every)
        if s is not None:
            config = replace(
                config,
                job_budget_s=s.signoff_job_budget_s,
                max_attempts=s.signoff_job_max_attempts,
                orphan_after_s=s.signoff_reconcile_after_s,
                reconcile_every_s=s.signoff_reconcile_every_s,
                concurrency=s.signoff_worker_concurrency,
            )
        if every is None:
            return Worker(self.runtime, config=config, handlers=handlers)

        async def checkpoint() -> None:
            await self.audit_checkpoint(skip_if_unchanged=True)

        return Worker(self.runtime, config=config, checkpoint=checkpoint, handlers=handlers)

    async def handle_handoff(self, job: Job) -> None:
        """A hand-off's relay job: a person's reply to the customer, a customer's message to the
        staff thread, the SLA re-page, an event for the agent (``agent/handoff_relay.py``)."""
        await run_job(self.runtime, self.relay, job)

    async def handle_inbound(self, job: Job) -> None:
        """One accepted message's job: its face runs the turn and delivers (each step resumable)."""
        item = await self.runtime.s.inbox.get(str(job.payload.get("inbound_id", "")))
        if item is None or item.status in ("delivered", "ignored", "failed"):
            return
        handler = self.inbound.get(item.face)
        if handler is None:
            # Accepted by a face this process was not configured with: retried later, not lost.
            raise RuntimeError(f"no {item.face} face configured in this process for {item.id}")
        await handler(item)


async def start_policy(db: Database, settings: Settings, seal_key: Ed25519PublicKey | None = None) -> ActivePolicy:
    """The policy in force at start (``seal_key``: the audit key a version in force is sealed
    by); a file or bundled one is recorded under its version the first time it is seen (that
    version string then names this text for good)."""
    active = await active_policy(PolicyVersions(db), settings.signoff_policy_file, seal_key=seal_key)
    if active.source != "database":
        await record_start(PolicyVersions(db), active.policy.version, active.yaml, source=active.where)
    log.info("policy %s from %s (%s)", active.policy.version, active.where, active.source)
    return active


#: Every face, one line each (a folder under bot/ and its line here): its factory reads its own
#: settings and builds it over a :class:`~bot.faces.FaceKit`, or says it is not configured.
FACES: tuple[FaceFactory, ...] = (
    api_wiring.face,
    email_wiring.face,
    slack_wiring.face,
    teams_wiring.face,
    shopify_wiring.face,
    widget_wiring.face,
)


async def create_app(
    settings: Settings,
    *,
    model: ModelClient | None = None,
    notifier: Notifier | None = None,
    clock: Callable[[], datetime] | None = None,
    seed: bool = True,
    faces: Sequence[FaceFactory] = FACES,
) -> App:
    """Build the runtime from settings, then every configured face over its port; seed an
    empty store with the configured dataset."""
    warn_if_development(settings)  # every start of serve, worker and socket comes through here
    # A bad people file stops the start before anything is touched.
    people = load_people_file(settings.signoff_people_file) if settings.signoff_people_file else None
    db = await open_database(settings)
    # OTEL_* are the OpenTelemetry SDK's own variables; this root only asks whether to export.
    tracing = install_tracing(os.environ, db)
    seal_key = (await policy_trust(settings))[1]
    active = await start_policy(db, settings, seal_key)
    metrics = Metrics(known_tools=build_registry().tools)
    instrumented = TracedModel(
        InstrumentedModel(model or build_model(settings, metrics), metrics), provider=settings.provider
    )
    clock = clock or wall_clock  # the one clock of every timestamp: the shop's and the runtime's
    backend = build_backend(settings, db, clock=clock)
    routed = RoutingNotifier(fallback=notifier or LogNotifier())  # the faces plug in below
    services = build_services(
        db=db,
        model=instrumented,
        backend=backend,
        policy=active.policy,
        notifier=routed,
        clock=clock,
        handoff_sla_s=settings.signoff_handoff_sla,
    )
    attach_metrics(services, metrics)
    await seed_data(settings, services, people, store=seed and settings.signoff_backend == "sandbox")
    runtime = Runtime(services)
    mailer = build_mailer(settings)
    kit = FaceKit(
        settings=settings, port=FacePort(runtime), backend=backend, clock=clock, mailer=mailer, engine=db.engine
    )
    built = await plug_faces(faces, kit, routed)
    return App(
        settings=settings,
        db=db,
        runtime=runtime,
        backend=backend,
        notifier=routed,
        metrics=metrics,
        tracing=tracing,
        mailer=mailer,
        inbound={f.name: f.handle for f in built},
        faces=tuple(built),
        slack=next((getattr(f, "inner", None) for f in built if f.name == "slack"), None),
        http_routes=tuple(r for f in built for r in f.routes()),
        policy=active,
        policy_seal_key=seal_key,
        relay=relay_of(built),
    )


def relay_of(faces: Sequence[Face]) -> Relay:
    """Where hand-offs' relayed messages go: each face adds its own ends (the HTTP API's are built in)."""
    relay = Relay()
    for face in faces:
        face.join(relay)
    return relay


async def plug_faces(factories: Sequence[FaceFactory], kit: FaceKit, routed: RoutingNotifier) -> list[Face]:
    """Build each configured face, start it and route its notifications to it."""
    built: list[Face] = []
    for factory in factories:
        face = factory(kit)
        if face is None:
            continue
        await face.start()
        if face.notifier is not None:
            routed.add(face.name, face.notifier, staff=face.staff)
        built.append(face)
    return built


async def open_database(settings: Settings) -> Database:
    """The configured database, once it answers: a database that is restarting is waited for
    (``SIGNOFF_START_WAIT_S``, else without bound: a worker started meanwhile comes up once it is
    back). "Not migrated" is said only when its schema is behind this release's migrations."""
    db = create_database(settings.signoff_database_url)
    wait = settings.signoff_start_wait_s
    try:
        await db.until_available(db.ping, budget_s=wait, what="start-up: waiting for the database")
        state = await db.until_available(
            rerunnable(lambda: schema.state(db.engine)), budget_s=wait, what="start-up: reading the schema's revision"
        )
    except BaseException:
        await db.dispose()
        raise
    if state.behind:
        await db.dispose()
        at = ", ".join(state.at) or "no revision"
        raise ConfigError(
            f"SIGNOFF_DATABASE_URL: database not migrated (at {at}; this release needs {', '.join(state.heads)}); "
            "run `signoff db upgrade`"
        )
    if state.unknown:
        log.warning(
            "the database is at revisions this release does not know (%s): a newer release migrated it",
            ", ".join(state.unknown),
        )
    return db


def build_backend(settings: Settings, db: Database, *, clock: Callable[[], datetime]) -> CommerceBackend:
    """The shop the tools act on: the sandbox store over ``db``, or a Shopify store's Admin API."""
    if settings.signoff_backend == "sandbox":
        return SandboxStore(db, clock=clock)
    from bot.shopify.messages import shop_sender

    return shopify_backend(settings.shopify_config(), sender=shop_sender(settings, SentMail(db, clock=clock)))


def shopify_backend(config: ShopifyConfig, *, sender: MessageSender | None = None) -> ShopifyBackend:
    """A :class:`ShopifyBackend` for ``config``: a static token, or the client credentials grant;
    ``sender``: how its messages go out (none: ``send_message`` is not offered)."""
    # Imported here: the GraphQL client loads graphql-core, which a sandbox deployment never needs.
    from shopify.auth import ClientCredentials, StaticToken, TokenSource
    from shopify.client import AdminClient
    from shopify.writes import ShopifyBackend

    tokens: TokenSource
    if config.access_token is not None:
        tokens = StaticToken(config.access_token)
        return ShopifyBackend(AdminClient(config, tokens), sender=sender)
    assert config.client_id is not None and config.client_secret is not None
    holder: list[AdminClient] = []
    tokens = ClientCredentials(
        url=config.token_url,
        client_id=config.client_id,
        client_secret=config.client_secret,
        session=lambda: holder[0].session(),
        timeout_s=config.timeout_s,
    )
    holder.append(AdminClient(config, tokens))
    return ShopifyBackend(holder[0], sender=sender)


def build_mailer(settings: Settings) -> Mailer | None:
    """The one SMTP client (email replies and follow-ups, Slack link codes), when configured."""
    from bot.email.smtp import SmtpMailer

    cfg = settings.smtp_config()
    return SmtpMailer(cfg) if cfg is not None else None


async def seed_data(settings: Settings, services: Services, people: PeopleSeed | None, *, store: bool) -> None:
    """At start: an empty sandbox store gets its dataset (``store``); a people file, when set, is
    the truth about people whatever the dataset said."""
    if store:
        await seed_store(
            services.db,
            settings.signoff_store_seed,
            production=settings.is_production,
            people=people is None,
            wait_s=settings.signoff_start_wait_s,
        )
    if people is not None:
        await services.people.replace(people)


async def seed_store(
    db: Database, seed: str | None, *, production: bool = False, people: bool = True, wait_s: float | None = None
) -> bool:
    """Load the seed dataset when the store is empty; the bundled demo is rebased to now
    (``people``: its staff and customers' Slack/Teams users seed signoff's people too).

    ``seed`` is a dataset file, ``"demo"`` (the bundled demo) or ``None``: the demo in
    development, nothing in production (an empty production store stays empty).
    """
    try:
        empty = await db.until_available(rerunnable(lambda: store_is_empty(db)), budget_s=wait_s, what="start-up")
    except Exception as exc:  # the schema is at head (open_database), yet the store cannot be read
        if db.fault(exc) is not None:
            raise
        raise ConfigError(f"SIGNOFF_DATABASE_URL: cannot read the sandbox store ({type(exc).__name__})") from None
    if not empty:
        return False
    if seed is None and production:
        log.warning(
            "the sandbox store is empty and this is production: the demo data is not loaded "
            "(run `signoff store load FILE`, or set SIGNOFF_STORE_SEED to a dataset file or `demo`)"
        )
        return False
    # Imported only to seed: the dataset's models are ~2 MB of a serving process that never seeds.
    from sandbox.dataset import load_dataset_file
    from sandbox.io import load_dataset

    bundled = seed in (None, "demo")
    dataset = load_dataset_file(demo_dataset_path() if bundled else Path(str(seed)))
    await load_dataset(db, dataset, rebase_to=datetime.now(UTC) if bundled else None, people=people)
    log.info("seeded the sandbox store from %s", "the bundled demo dataset" if bundled else seed)
    return True
