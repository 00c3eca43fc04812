"""The composition root: the only place real clients are built from settings."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from agent import handoff
from agent.errors import ConfigError
from agent.handoff_relay import Relay, run_job
from agent.llm.base import ModelClient
from agent.metrics import InstrumentedModel, Metrics, attach_metrics
from agent.notify import LogNotifier, Notifier, RoutingNotifier
from agent.people import load_people_file
from agent.policy import Policy
from agent.policy_store import REFRESH_EVERY_S, ActivePolicy, PolicyRefresher, active_policy
from agent.runtime import Runtime
from agent.services import Services, build_services
from agent.tracing import TracedModel
from agent.worker import Worker, WorkerConfig
from bot.email.smtp import Mailer
from bot.production import warn_if_development
from bot.settings import Settings, reveal
from bot.telemetry import Tracing, install_tracing
from sandbox.dataset import load_dataset_file
from sandbox.io import load_dataset, store_is_empty
from sandbox.store import SandboxStore
from storage import checkpoints
from storage.checkpoints import Checkpoint
from storage.db import Database, create_database
from storage.identities import PeopleSeed
from storage.inbox import INBOUND_JOB, Inbound
from storage.jobs import Job
from storage.policies import PolicyVersions
from storage.records import wall_clock

if TYPE_CHECKING:
    from bot.slack.face import SlackFace
    from shopify.config import ShopifyConfig
    from shopify.writes import ShopifyBackend
from tools.backend import CommerceBackend
from tools.catalogue import build_registry

log = logging.getLogger(__name__)

#: How long ``serve`` and ``worker`` wait at start for a database that is unavailable (restarting).
START_WAIT_S = 120.0

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
    #: HTTP routes the faces built (Teams: ``POST /teams/messages``); the server mounts them.
    http_routes: tuple[web.AbstractRouteDef, ...] = ()
    #: The policy in force at start and where it came from (the database's newest applied
    #: version wins over the file); :meth:`policy_refresher` picks up later applies.
    policy: ActivePolicy | None = None
    #: Where a hand-off's relayed messages go: each face's customers and staff threads (one line a face).
    relay: Relay = field(default_factory=Relay)

    async def close(self) -> None:
        # Outcomes of done side effects still being recorded get a last chance before the engine goes.
        await self.runtime.s.executor.drain(timeout_s=10.0)
        if self.slack is not None:
            await self.slack.close()
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
        return PolicyRefresher(
            PolicyVersions(self.db),
            self.runtime.s.use_policy,
            seen_id=row.id if row is not None else None,
            every_s=every_s,
        )

    def worker(self) -> Worker:
        """The worker: resume and expiry, the faces' accepted messages, and audit checkpoints
        on the configured schedule."""
        handlers = {INBOUND_JOB: self.handle_inbound, **{kind: self.handle_handoff for kind in handoff.JOB_KINDS}}
        s = self.settings
        every = s.checkpoint_every_s if s is not None else None
        config = WorkerConfig(checkpoint_every_s=every)
        if s is not None:
            config = replace(config, job_budget_s=s.signoff_job_budget_s, max_attempts=s.signoff_job_max_attempts)
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


async def create_app(
    settings: Settings,
    *,
    model: ModelClient | None = None,
    notifier: Notifier | None = None,
    clock: Callable[[], datetime] | None = None,
    seed: bool = True,
) -> App:
    """Build the runtime from settings; seed an empty store with the configured dataset."""
    warn_if_development(settings)  # every start of serve, worker and socket comes through here
    # A bad people file stops the start before anything is touched.
    people = load_people_file(settings.signoff_people_file) if settings.signoff_people_file else None
    db = await open_database(settings)
    # OTEL_* are the OpenTelemetry SDK's own variables; this root only asks whether to export.
    tracing = install_tracing(os.environ, db)
    active = await active_policy(PolicyVersions(db), settings.signoff_policy_file)
    log.info("policy %s from %s (%s)", active.policy.version, active.where, active.source)
    policy = active.policy
    metrics = Metrics(known_tools=build_registry().tools)
    instrumented = TracedModel(
        InstrumentedModel(model or build_model(settings, metrics), metrics), provider=settings.provider
    )
    clock = clock or wall_clock  # the one clock of every timestamp: the shop's and the runtime's
    backend = build_backend(settings, db, clock=clock)
    mailer, faces = email_face(settings, backend)
    teams = teams_face(settings, backend, clock=clock)
    routed = routing(faces, teams, notifier)
    sla = settings.signoff_handoff_sla
    services = build_services(
        db=db, model=instrumented, backend=backend, policy=policy, notifier=routed, clock=clock, handoff_sla_s=sla
    )
    attach_metrics(services, metrics)
    await seed_data(settings, services, people, store=seed and settings.signoff_backend == "sandbox")
    runtime = Runtime(services)
    inbound: dict[str, InboundHandler] = email_inbound(settings, runtime, mailer)  # the email face's worker side
    slack = slack_face(settings, runtime, backend, mailer)
    if slack is not None:
        await slack[0].start()
        routed.add("slack", slack[1], staff=True)
        inbound["slack"] = slack[2]
    routes: list[web.AbstractRouteDef] = [*shopify_webhooks(settings, backend, runtime, inbound)]
    if teams is not None:
        teams.face.attach(runtime)
        inbound["teams"] = teams.face.handle
        routes += teams.face.routes()
    return App(
        settings=settings,
        db=db,
        runtime=runtime,
        backend=backend,
        notifier=routed,
        metrics=metrics,
        tracing=tracing,
        mailer=mailer,
        inbound=inbound,
        slack=slack[0] if slack is not None else None,
        http_routes=tuple(routes),
        policy=active,
        relay=build_relay(settings, runtime, mailer, slack[0] if slack else None, teams.face if teams else None),
    )


def routing(faces: dict[str, Notifier], teams: TeamsWiring | None, fallback: Notifier | None) -> RoutingNotifier:
    """The runtime's notifier: follow-ups by face, approval cards and escalations to the staff surfaces."""
    staff: list[Notifier] = []
    if teams is not None:
        faces["teams"], teams_staff = teams.notifiers()
        staff += teams_staff
    return RoutingNotifier(faces=faces, staff=staff, fallback=fallback or LogNotifier())


async def open_database(settings: Settings) -> Database:
    """The configured database, once it answers: a database that is restarting is waited for
    (a worker started meanwhile comes up once it is back)."""
    db = create_database(settings.signoff_database_url)
    await db.until_available(db.ping, budget_s=START_WAIT_S, what="start-up: waiting for the database")
    return db


def build_backend(settings: Settings, db: Database, *, clock: Callable[[], datetime]) -> CommerceBackend:
    """The shop the tools act on: the sandbox store over ``db``, or a Shopify store's Admin API."""
    if settings.signoff_backend == "sandbox":
        return SandboxStore(db, clock=clock)
    return shopify_backend(settings.shopify_config())


def shopify_backend(config: ShopifyConfig) -> ShopifyBackend:
    """A :class:`ShopifyBackend` for ``config``: a static token, or the client credentials grant."""
    # Imported here: the GraphQL client loads graphql-core, which a sandbox deployment never needs.
    from shopify.auth import ClientCredentials, StaticToken, TokenSource
    from shopify.client import AdminClient
    from shopify.writes import ShopifyBackend

    tokens: TokenSource
    if config.access_token is not None:
        tokens = StaticToken(config.access_token)
        return ShopifyBackend(AdminClient(config, tokens))
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
    return ShopifyBackend(holder[0])


def shopify_webhooks(
    settings: Settings, backend: CommerceBackend, runtime: Runtime, inbound: dict[str, InboundHandler]
) -> list[web.RouteDef]:
    """With a Shopify backend, the webhooks face: its worker handler (into ``inbound``) and
    ``POST /shopify/webhooks``; nothing with the sandbox."""
    if settings.signoff_backend != "shopify":
        return []
    from bot.shopify.face import ShopifyFace
    from shopify.writes import ShopifyBackend

    assert isinstance(backend, ShopifyBackend)

    face = ShopifyFace(config=settings.shopify_config(), backend=backend, runtime=runtime)
    inbound["shopify"] = face.handle
    return face.routes()


def slack_face(
    settings: Settings, runtime: Runtime, backend: CommerceBackend, mailer: Mailer | None
) -> tuple[SlackFace, Notifier, InboundHandler] | None:
    """The Slack face (client, sender), its notifier and its worker handler; ``None`` without Slack."""
    from bot.slack import turns
    from bot.slack.face import SlackConfig
    from bot.slack.face import SlackFace as Face
    from bot.slack.notifier import SlackNotifier

    cfg = SlackConfig.from_settings(settings)
    if cfg is None:
        return None
    face = Face.build(cfg, runtime, backend, mailer)

    async def handle(item: Inbound) -> None:
        await turns.handle(face, item)

    return face, SlackNotifier(face), handle


def build_relay(
    settings: Settings, runtime: Runtime, mailer: Mailer | None, slack: SlackFace | None, teams: Face | None
) -> Relay:
    """Where hand-offs' relayed messages go: one line per face (the HTTP API's is built in)."""
    relay = Relay()
    email_relay(settings, runtime, mailer, relay)
    if slack is not None:
        slack_relay(slack, relay)
    if teams is not None:
        teams_relay(teams, relay)
    return relay


def slack_relay(face: SlackFace, relay: Relay) -> None:
    """Hand-offs: Slack customers get a person's replies in their thread; the escalation thread
    gets the customer's messages and the SLA re-page."""
    from bot.slack import handoff as slack_handoff

    relay.deliver_on("slack", slack_handoff.customer_delivery(face))
    relay.post_on(slack_handoff.SURFACE, slack_handoff.thread_post(face))


def teams_relay(face: Face, relay: Relay) -> None:
    """Hand-offs: Teams customers get a person's replies in their conversation."""
    from bot.teams import handoff as teams_handoff
    from bot.teams.face import TeamsFace

    assert isinstance(face, TeamsFace)
    relay.deliver_on("teams", teams_handoff.customer_delivery(face))


def email_relay(settings: Settings, runtime: Runtime, mailer: Mailer | None, relay: Relay) -> None:
    """Hand-offs: email customers get a person's replies by email, in their thread, from the shop."""
    from bot.email.bridge import smtp_config
    from bot.email.handoff import email_delivery
    from storage.mailbox import SentMail

    cfg = smtp_config(settings)
    if mailer is not None and cfg is not None and cfg.from_address:
        relay.deliver_on("email", email_delivery(runtime, mailer, cfg.from_address, SentMail(runtime.s.db)))


def email_inbound(settings: Settings, runtime: Runtime, mailer: Mailer | None) -> dict[str, InboundHandler]:
    """``App.inbound`` for the email face: each accepted mail's turn and its one reply."""
    from bot.email.bridge import smtp_config
    from bot.email.turns import FACE, EmailTurns
    from storage.mailbox import SentMail

    cfg = smtp_config(settings)
    shop = cfg.from_address if cfg is not None else None
    return {FACE: EmailTurns(runtime=runtime, mailer=mailer, from_address=shop, sent=SentMail(runtime.s.db))}


class Face(Protocol):
    """A face that needs the runtime after it is built (its notifier is one of the runtime's
    collaborators), works accepted messages in the worker and serves its own HTTP routes."""

    def attach(self, runtime: Runtime) -> None: ...
    async def handle(self, item: Inbound) -> None: ...
    def routes(self) -> list[web.RouteDef]: ...


@dataclass(frozen=True, kw_only=True)
class TeamsWiring:
    """The Teams face and its notifier (follow-ups; approval cards when a conversation is set)."""

    face: Face
    notifier: Notifier
    staff_surface: bool

    def notifiers(self) -> tuple[Notifier, list[Notifier]]:
        return self.notifier, [self.notifier] if self.staff_surface else []


def teams_face(
    settings: Settings, backend: CommerceBackend, *, clock: Callable[[], datetime] | None = None
) -> TeamsWiring | None:
    """The Teams face when ``SIGNOFF_TEAMS_APP_ID``/``_TENANT_ID`` are set (imported only then:
    the Agents SDK is a second's import). Outbound tokens: MSAL client credentials, or the
    development token (loopback connectors only)."""
    config = settings.teams_config()
    if config is None:
        return None
    from bot.teams.face import TeamsFace, approvals_reference
    from bot.teams.notifier import TeamsNotifier
    from bot.teams.sender import TeamsSender, dev_token_connections, msal_connections

    dev_token = reveal(settings.signoff_teams_dev_outbound_token)
    connections = dev_token_connections(config, dev_token) if dev_token else msal_connections(config)
    sender = TeamsSender(config, connections=connections, loopback_only=dev_token is not None)
    conversation, service_url = settings.signoff_teams_approvals_conversation, settings.signoff_teams_service_url
    ref = approvals_reference(config, conversation, service_url) if conversation and service_url else None
    face = TeamsFace(config, sender=sender, backend=backend, approvals_reference=ref, clock=clock)
    return TeamsWiring(face=face, notifier=TeamsNotifier(face), staff_surface=ref is not None)


def email_face(settings: Settings, backend: CommerceBackend) -> tuple[Mailer | None, dict[str, Notifier]]:
    """The SMTP client (built once, for replies and follow-ups) and the email face's notifier."""
    from bot.email.bridge import smtp_config
    from bot.email.smtp import EmailFollowUps, SmtpMailer

    cfg = smtp_config(settings)
    if cfg is None:
        return None, {}
    mailer = SmtpMailer(cfg)
    if not cfg.from_address:
        return mailer, {}
    return mailer, {"email": EmailFollowUps(mailer=mailer, backend=backend, from_address=cfg.from_address)}


async def seed_data(settings: Settings, services: Services, people: PeopleSeed | None, *, store: bool) -> None:
    """At start: an empty sandbox store gets its dataset (``store``); a people file, when set, is
    the truth about people whatever the dataset said."""
    if store:
        await seed_store(
            services.db, settings.signoff_store_seed, production=settings.is_production, people=people is None
        )
    if people is not None:
        await services.people.replace(people)


async def seed_store(db: Database, seed: str | None, *, production: bool = False, people: bool = True) -> bool:
    """Load the seed dataset when the store is empty; the bundled demo is rebased to now
    (``people``: its staff and customers' Slack/Teams users seed signoff's people too).

    ``seed`` is a dataset file, ``"demo"`` (the bundled demo) or ``None``: the demo in
    development, nothing in production (an empty production store stays empty).
    """
    try:
        empty = await db.until_available(lambda: store_is_empty(db), budget_s=START_WAIT_S, what="start-up")
    except Exception as exc:  # the tables are missing: migrations were not run (an outage is re-raised)
        if db.fault(exc) is not None:
            raise
        raise ConfigError(
            f"SIGNOFF_DATABASE_URL: database not migrated ({type(exc).__name__}); run `signoff db upgrade`"
        ) from None
    if not empty:
        return False
    if seed is None and production:
        log.warning(
            "the sandbox store is empty and this is production: the demo data is not loaded "
            "(run `signoff store load FILE`, or set SIGNOFF_STORE_SEED to a dataset file or `demo`)"
        )
        return False
    bundled = seed in (None, "demo")
    dataset = load_dataset_file(demo_dataset_path() if bundled else Path(str(seed)))
    await load_dataset(db, dataset, rebase_to=datetime.now(UTC) if bundled else None, people=people)
    log.info("seeded the sandbox store from %s", "the bundled demo dataset" if bundled else seed)
    return True
