"""Settings, resolved once at start-up (pydantic-settings; ``.env`` honoured).

A missing or malformed setting raises :class:`ConfigError` whose message is one
line naming the variable. Nothing below the composition root reads the
environment.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.errors import ConfigError

if TYPE_CHECKING:
    from bot.email.config import SmtpConfig
    from bot.slack.config import SlackConfig
    from bot.teams.config import TeamsConfig
from shopify.config import ShopifyConfig, shopify_config

DEFAULT_MODEL = "claude-sonnet-4-5"
#: HS256 needs a key at least as long as its hash (RFC 7518 §3.2).
MIN_JWT_SECRET_BYTES = 32
DEFAULT_JWT_MAX_TTL_S = 24 * 3600
#: How often the worker signs an audit checkpoint once a key or checkpoint file is configured.
DEFAULT_CHECKPOINT_EVERY_S = 300.0
_DB_URL_PREFIXES = ("sqlite+aiosqlite://", "postgresql+asyncpg://")
_PASSWORD = re.compile(r"(://[^:/@]*):[^@/]*@")  # linear: a password has no bare "/"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    #: May carry a password: kept out of ``repr`` (the CLI prints it with the password redacted).
    signoff_database_url: str = Field(default="sqlite+aiosqlite:///./signoff.db", repr=False)
    signoff_llm_provider: Literal["anthropic", "openai", "scripted"] | None = None
    signoff_model: str = DEFAULT_MODEL
    #: The vendor SDK's retries of one model call (429/5xx/connection errors, honouring retry-after).
    signoff_model_max_retries: int = Field(default=4, ge=0, le=10)
    #: Seconds one HTTP attempt to the model may take.
    signoff_model_timeout_s: float = Field(default=60.0, gt=0)
    #: Seconds one model call may take, retries and their waits included; then the turn gives up honestly.
    signoff_model_deadline_s: float = Field(default=120.0, gt=0)
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    openai_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    #: Slack (bot/slack/settings.py says what they mean): on with the bot token or the OAuth client.
    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    signoff_slack_api_url: str | None = None
    signoff_approvals_channel: str | None = None
    signoff_escalation_channel: str | None = None
    #: Slack user group (``S…``) whose members are supervisors, beside the dataset's staff list.
    signoff_slack_supervisor_group: str | None = None
    #: Slack user group mentioned on escalations (the on-call rota).
    signoff_slack_oncall_group: str | None = None
    #: Stream answers (``chat.startStream``); off: every answer is a plain ``chat.postMessage``.
    signoff_slack_streaming: bool = True
    slack_client_id: str | None = None
    slack_client_secret: SecretStr | None = None
    #: Comma-separated Slack team ids served (installs and events from any other are refused).
    signoff_slack_allowed_teams: str | None = None
    #: Encrypts secrets kept in the database (the OAuth installations' Slack tokens); 32+ characters.
    signoff_secret_key: SecretStr | None = None
    signoff_jwt_secret: SecretStr | None = None
    signoff_jwks_url: str | None = None
    signoff_jwt_audience: str | None = None
    signoff_jwt_issuer: str | None = None
    signoff_jwt_max_ttl_s: int = DEFAULT_JWT_MAX_TTL_S
    signoff_policy_file: Path | None = None
    #: Staff and the faces' user ids of customers (agent/people.py); else the sandbox dataset's.
    signoff_people_file: Path | None = None
    signoff_store_seed: str | None = None
    #: Production unless told otherwise: demo data, demo staff and every development flag need
    #: ``SIGNOFF_ENV=development`` (bot/production.py).
    signoff_env: Literal["development", "production"] = "production"
    signoff_migration_database_url: str | None = Field(default=None, repr=False)
    signoff_audit_key_file: Path | None = None
    signoff_audit_checkpoint_file: Path | None = None
    signoff_audit_checkpoint_every_s: float | None = None
    #: Seconds one background job (a turn, a resume) may run before it is cancelled as a failed attempt.
    signoff_job_budget_s: float = Field(default=300.0, gt=0, le=3600)
    #: Failed attempts before a job is quarantined (terminal; listed by ``signoff jobs``).
    signoff_job_max_attempts: int = Field(default=5, ge=1, le=100)
    #: Background jobs (turns, resumes) one worker runs at once; turns mostly wait on the model,
    #: so a process keeps many in flight (``bench/concurrency_workers.py``).
    signoff_worker_concurrency: int = Field(default=32, ge=1, le=1000)
    #: Seconds ``serve`` and ``worker`` wait at start for an unavailable (restarting) database;
    #: unset: without bound (logged while it waits).
    signoff_start_wait_s: float | None = Field(default=None, gt=0)
    #: Seconds a ledger claim may stay ``executing`` before the worker's pass reconciles it (stuck).
    signoff_reconcile_after_s: float = Field(default=60.0, ge=1, le=86400)
    #: Seconds between the worker's reconciliation passes.
    signoff_reconcile_every_s: float = Field(default=10.0, ge=0.1, le=3600)
    #: Seconds an unclaimed hand-off to a person waits (within support hours) before on-call is mentioned again.
    signoff_handoff_sla: float = Field(default=300.0, ge=1, le=86400)
    #: The separate audit signer (``unix:/PATH`` or ``http://127.0.0.1:PORT``): signs checkpoints
    #: and keeps the highest seq it signed, out of the app user's reach; it also seals each
    #: ``policy.applied`` (with it, or an audit key file, a version in force needs that seal).
    signoff_audit_signer: str | None = None
    #: Where each checkpoint is also sent, off this host: an append-only HTTP(S) endpoint or a
    #: directory on a WORM mount.
    signoff_audit_publish: str | None = None
    #: A supervisor's JWT for ``signoff policy apply|approve`` (instead of ``--token``).
    signoff_staff_token: SecretStr | None = None
    signoff_metrics_token: SecretStr | None = None
    signoff_metrics_addr: str | None = None
    #: ``/metrics`` on its own port (on ``serve --host``); without it or the address above,
    #: ``/metrics`` is answered on the main port to loopback peers only (bot/server.py).
    signoff_metrics_port: int | None = Field(default=None, ge=1, le=65535)
    #: Email (bot/email/settings.py says what they mean): SMTP out, the inbound webhook's secret.
    signoff_smtp_url: str | None = None
    signoff_email_secret: SecretStr | None = None
    signoff_email_from: str | None = None
    #: Microsoft Teams (bot/teams/config.py): on when the app and tenant ids are set.
    signoff_teams_app_id: str | None = None
    signoff_teams_tenant_id: str | None = None
    signoff_teams_app_password: SecretStr | None = None
    signoff_teams_certificate_pfx: Path | None = None
    signoff_teams_service_url_allow: str | None = None
    signoff_teams_allowed_tenants: str | None = None
    signoff_teams_dev_anonymous: bool = False
    #: Where approval cards (and escalations) go: a channel's conversation id and its service URL.
    signoff_teams_approvals_conversation: str | None = None
    signoff_teams_service_url: str | None = None
    #: Development against a local connector only (refused in production).
    signoff_teams_dev_jwks_url: str | None = None
    signoff_teams_dev_outbound_token: SecretStr | None = None
    #: The public messaging endpoint the app package names (``signoff teams manifest``).
    signoff_teams_messaging_endpoint: str | None = None
    #: The shop the tools act on: the bundled sandbox store, or a Shopify store (INTERFACES "Shopify").
    signoff_backend: Literal["sandbox", "shopify"] = "sandbox"
    signoff_shopify_shop: str | None = None
    signoff_shopify_api_version: str | None = None
    signoff_shopify_client_id: str | None = None
    signoff_shopify_client_secret: SecretStr | None = None
    signoff_shopify_access_token: SecretStr | None = None
    signoff_shopify_webhook_secret: SecretStr | None = None
    signoff_shopify_admin_url: str | None = None
    #: The customer's chat widget (bot/widget): on with ``true``; the shops' origins it may be
    #: served to cross-site (CSV, exact ``https://host[:port]``); the app proxy is verified with
    #: SIGNOFF_SHOPIFY_CLIENT_SECRET.
    signoff_widget: bool = False
    signoff_widget_origins: str | None = None
    #: Seconds between the pieces of a live answer in the widget's stream (0: all at once).
    signoff_widget_chunk_delay_s: float = Field(default=0.03, ge=0, le=5)
    #: New guest sessions one address may open per hour.
    signoff_widget_sessions_per_ip_hour: int = Field(default=20, ge=1)

    @field_validator("signoff_database_url", "signoff_migration_database_url")
    @classmethod
    def _db_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(_DB_URL_PREFIXES):
            raise ValueError("must be sqlite+aiosqlite://… or postgresql+asyncpg://…")
        return v

    @field_validator("signoff_policy_file", "signoff_people_file")
    @classmethod
    def _file_exists(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_file():
            raise ValueError(f"no such file: {v}")
        return v

    @field_validator("signoff_store_seed")
    @classmethod
    def _seed(cls, v: str | None) -> str | None:
        if v is not None and v != "demo" and not Path(v).is_file():
            raise ValueError(f"must be `demo` or a dataset file; no such file: {v}")
        return v

    @model_validator(mode="after")
    def _demo_seed(self) -> Settings:
        # The demo dataset brings staff S-1..S-4 (a supervisor among them) that anyone can name.
        if self.signoff_store_seed == "demo" and self.is_production:
            raise ValueError(
                "SIGNOFF_STORE_SEED: `demo` seeds the demo staff; refused in production "
                "(set SIGNOFF_ENV=development, or load a dataset file)"
            )
        return self

    @field_validator("signoff_jwt_secret")
    @classmethod
    def _secret(cls, v: SecretStr | None) -> SecretStr | None:
        size = len(v.get_secret_value().encode()) if v is not None else None
        if size is not None and size < MIN_JWT_SECRET_BYTES:
            raise ValueError(
                f"must be at least {MIN_JWT_SECRET_BYTES} bytes for HS256 (got {size}); "
                "generate one with `python3 -c 'import secrets; print(secrets.token_hex(32))'`"
            )
        return v

    @field_validator("signoff_jwt_max_ttl_s")
    @classmethod
    def _max_ttl(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("must be a positive number of seconds")
        return v

    @field_validator("signoff_audit_checkpoint_every_s")
    @classmethod
    def _every(cls, v: float | None) -> float | None:
        if v is not None and v < 0:
            raise ValueError("must be 0 (off) or a positive number of seconds")
        return v

    @field_validator("signoff_metrics_token")
    @classmethod
    def _metrics_token(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and len(v.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters")
        return v

    @field_validator("signoff_metrics_addr")
    @classmethod
    def _metrics_addr(cls, v: str | None) -> str | None:
        if v is not None:
            host, _, port = v.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:9100")
        return v

    @model_validator(mode="after")
    def _provider(self) -> Settings:
        if self.signoff_llm_provider == "anthropic" and not self.anthropic_api_key:
            raise ValueError("ANTHROPIC_API_KEY: required when SIGNOFF_LLM_PROVIDER=anthropic")
        if self.signoff_llm_provider == "openai" and not self.openai_base_url:
            raise ValueError("OPENAI_BASE_URL: required when SIGNOFF_LLM_PROVIDER=openai")
        return self

    @model_validator(mode="after")
    def _slack(self) -> Settings:
        self.slack_config()  # fails at start-up, naming the variable
        return self

    @model_validator(mode="after")
    def _email(self) -> Settings:
        self.smtp_config()  # fails at start-up, naming the variable
        return self

    @model_validator(mode="after")
    def _jwks(self) -> Settings:
        if self.signoff_jwks_url:
            for name in ("signoff_jwt_audience", "signoff_jwt_issuer"):
                if not getattr(self, name):
                    raise ValueError(
                        f"{name.upper()}: required when SIGNOFF_JWKS_URL is set "
                        "(tokens from an identity provider must name this API and their issuer)"
                    )
        return self

    @model_validator(mode="after")
    def _teams(self) -> Settings:
        self.teams_config()  # fails at start-up, naming the variable
        return self

    @model_validator(mode="after")
    def _shopify(self) -> Settings:
        if self.signoff_backend == "shopify":
            self.shopify_config()  # fails at start-up, naming the variable
        return self

    def shopify_config(self) -> ShopifyConfig:
        """The Shopify store's settings (``ValueError`` naming the variable when incomplete)."""
        return shopify_config(
            shop=self.signoff_shopify_shop,
            api_version=self.signoff_shopify_api_version,
            client_id=self.signoff_shopify_client_id,
            client_secret=reveal(self.signoff_shopify_client_secret),
            access_token=reveal(self.signoff_shopify_access_token),
            webhook_secret=reveal(self.signoff_shopify_webhook_secret),
            admin_url=self.signoff_shopify_admin_url,
        )

    def slack_config(self) -> SlackConfig | None:
        """The Slack face's settings, or ``None`` when Slack is not configured (its section is
        read in its own folder, ``bot/slack/settings.py``; the SDK is not imported here)."""
        from bot.slack.settings import slack_config_of

        return slack_config_of(self)

    def smtp_config(self) -> SmtpConfig | None:
        """The SMTP settings (replies, follow-ups, link codes), or ``None`` without
        ``SIGNOFF_SMTP_URL`` (read in the email face's folder, ``bot/email/settings.py``)."""
        from bot.email.settings import smtp_config_of

        return smtp_config_of(self)

    def teams_config(self) -> TeamsConfig | None:
        """The Teams face's settings, or ``None`` when Teams is not configured (its section is
        read in its own folder, ``bot/teams/settings.py``; the SDK is not imported here)."""
        from bot.teams.settings import teams_config_of

        return teams_config_of(self)

    @property
    def provider(self) -> str:
        """The model provider: as configured, else ``anthropic`` with a key and ``scripted`` without."""
        if self.signoff_llm_provider is not None:
            return self.signoff_llm_provider
        return "anthropic" if self.anthropic_api_key else "scripted"

    def require_model(self, command: str) -> None:
        """A long-running face needs a real model, or an explicit choice of the offline planner."""
        if self.signoff_llm_provider is None and not self.anthropic_api_key:
            raise ConfigError(
                f"ANTHROPIC_API_KEY: required for `signoff {command}` (or set "
                "SIGNOFF_LLM_PROVIDER=scripted for the offline demo planner, or openai with "
                "OPENAI_BASE_URL)"
            )

    @property
    def is_production(self) -> bool:
        """Everything but ``SIGNOFF_ENV=development`` (whatever the database)."""
        return self.signoff_env != "development"

    @property
    def audit_key_path(self) -> Path:
        """The Ed25519 key that signs audit checkpoints (never in the database)."""
        return self.signoff_audit_key_file or Path.home() / ".config" / "signoff" / "audit-key.pem"

    @property
    def audit_checkpoint_path(self) -> Path:
        """Where signed audit checkpoints are appended: one default file per database."""
        if self.signoff_audit_checkpoint_file is not None:
            return self.signoff_audit_checkpoint_file
        return Path.home() / ".local" / "state" / "signoff" / f"audit-checkpoints-{self.database_id}.jsonl"

    @property
    def database_id(self) -> str:
        """12 hex digits naming the database: its URL without password (a SQLite path made absolute)."""
        url = _PASSWORD.sub(r"\1@", self.signoff_database_url)
        if url.startswith("sqlite"):
            scheme, _, path = url.partition(":///")
            if path and path != ":memory:":
                url = f"{scheme}:///{Path(path).resolve()}"
        return hashlib.sha256(url.encode()).hexdigest()[:12]

    @property
    def checkpoint_every_s(self) -> float | None:
        """The worker's checkpoint period: as configured (0 is off), else every
        :data:`DEFAULT_CHECKPOINT_EVERY_S` once a key or checkpoint file is configured, else off."""
        if self.signoff_audit_checkpoint_every_s is not None:
            return self.signoff_audit_checkpoint_every_s or None
        if self.signoff_audit_key_file or self.signoff_audit_checkpoint_file or self.signoff_audit_signer:
            return DEFAULT_CHECKPOINT_EVERY_S
        return None

    def metrics_listen(self, host: str) -> tuple[str, int] | None:
        """Where ``/metrics`` gets a listener of its own: ``SIGNOFF_METRICS_ADDR`` as (host, port),
        else ``SIGNOFF_METRICS_PORT`` on ``host`` (the main listener's), else ``None``."""
        if not self.signoff_metrics_addr:
            return (host, self.signoff_metrics_port) if self.signoff_metrics_port else None
        host, _, port = self.signoff_metrics_addr.rpartition(":")
        return host.strip("[]"), int(port)


def reveal(secret: SecretStr | None) -> str | None:
    """A secret setting's value, for the one client that sends it (never for a log line or error)."""
    return secret.get_secret_value() if secret is not None else None


def load_settings(env: dict[str, str] | None = None, *, development: bool = False) -> Settings:
    """Resolve settings from ``env`` (default: the process environment); ``development`` forces
    ``SIGNOFF_ENV=development`` (``signoff demo``, which is development by definition)."""
    forced = {"signoff_env": "development"} if development else {}
    try:
        if env is None:
            return Settings(**forced)  # type: ignore[arg-type]
        saved = dict(os.environ)
        try:
            os.environ.clear()
            os.environ.update(env)
            return Settings(_env_file=None, **forced)  # type: ignore[arg-type,call-arg]
        finally:
            os.environ.clear()
            os.environ.update(saved)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = err.get("loc") or ()
        name = str(loc[0]).upper() if loc else ""
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if not name and ":" in msg:
            raise ConfigError(msg) from None
        raise ConfigError(f"{name or 'settings'}: {msg}") from None
