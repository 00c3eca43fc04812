"""Settings, resolved once at start-up (pydantic-settings; ``.env`` honoured).

A missing or malformed setting raises :class:`ConfigError` whose message is one
line naming the variable. Nothing below the composition root reads the
environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.errors import ConfigError

DEFAULT_MODEL = "claude-sonnet-4-5"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    signoff_database_url: str = "sqlite+aiosqlite:///./signoff.db"
    signoff_llm_provider: Literal["anthropic", "openai", "scripted"] | None = None
    signoff_model: str = DEFAULT_MODEL
    #: The vendor SDK's retries of one model call (429/5xx/connection errors, honouring retry-after).
    signoff_model_max_retries: int = Field(default=4, ge=0, le=10)
    #: Seconds one HTTP attempt to the model may take.
    signoff_model_timeout_s: float = Field(default=60.0, gt=0)
    #: Seconds one model call may take, retries and their waits included; then the turn gives up honestly.
    signoff_model_deadline_s: float = Field(default=120.0, gt=0)
    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    slack_bot_token: str | None = None
    slack_signing_secret: str | None = None
    slack_app_token: str | None = None
    signoff_slack_api_url: str | None = None
    signoff_approvals_channel: str | None = None
    signoff_escalation_channel: str | None = None
    signoff_jwt_secret: str | None = None
    signoff_jwks_url: str | None = None
    signoff_jwt_audience: str | None = None
    signoff_jwt_issuer: str | None = None
    signoff_policy_file: Path | None = None
    signoff_store_seed: Path | None = None
    signoff_smtp_url: str | None = None
    signoff_email_secret: str | None = None
    signoff_email_from: str | None = None

    @field_validator("signoff_database_url")
    @classmethod
    def _db_url(cls, v: str) -> str:
        if not (v.startswith("sqlite+aiosqlite://") or v.startswith("postgresql+asyncpg://")):
            raise ValueError("must be sqlite+aiosqlite://… or postgresql+asyncpg://…")
        return v

    @field_validator("signoff_policy_file", "signoff_store_seed")
    @classmethod
    def _file_exists(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_file():
            raise ValueError(f"no such file: {v}")
        return v

    @field_validator("signoff_smtp_url")
    @classmethod
    def _smtp(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("smtp://", "smtps://")):
            raise ValueError("must be smtp://host:port or smtps://host:port")
        return v

    @field_validator("signoff_email_from")
    @classmethod
    def _from(cls, v: str | None) -> str | None:
        if v is not None and (v.count("@") != 1 or any(c in v for c in " <>\r\n")):
            raise ValueError("must be a plain address like support@shop.example")
        return v

    @model_validator(mode="after")
    def _provider(self) -> Settings:
        if self.signoff_llm_provider is None:
            self.signoff_llm_provider = "anthropic" if self.anthropic_api_key else "scripted"
        if self.signoff_llm_provider == "anthropic" and not self.anthropic_api_key:
            raise ValueError("ANTHROPIC_API_KEY: required when SIGNOFF_LLM_PROVIDER=anthropic")
        if self.signoff_llm_provider == "openai" and not self.openai_base_url:
            raise ValueError("OPENAI_BASE_URL: required when SIGNOFF_LLM_PROVIDER=openai")
        return self

    @property
    def provider(self) -> str:
        assert self.signoff_llm_provider is not None
        return self.signoff_llm_provider


def load_settings(env: dict[str, str] | None = None) -> Settings:
    """Resolve settings from ``env`` (default: the process environment)."""
    try:
        if env is None:
            return Settings()
        saved = dict(os.environ)
        try:
            os.environ.clear()
            os.environ.update(env)
            return Settings(_env_file=None)  # type: ignore[call-arg]
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
