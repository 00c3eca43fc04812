"""The OAuth installations: only allowed workspaces, and their tokens sealed at rest.

:class:`SealedInstallations` stands in front of the SDK's SQLAlchemy installation store:

* an install from a workspace outside ``SIGNOFF_SLACK_ALLOWED_TEAMS`` is refused before
  anything is stored (Bolt's callback then shows its failure page), and no installation of
  such a workspace is ever found — so its events are not authorized and nothing happens;
* every token (bot, user, refresh) is stored as ``enc1:`` + AES-256-GCM under a key derived
  from ``SIGNOFF_SECRET_KEY``, bound to its column and team; ``xoxb-`` never reaches the
  database. Rows an older version stored in clear are sealed in place at start-up
  (:meth:`SealedInstallations.start`).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.oauth.installation_store.sqlalchemy import AsyncSQLAlchemyInstallationStore

from storage.sealed import reseal

log = logging.getLogger(__name__)

PREFIX = "enc1:"
_TOKENS = ("bot_token", "bot_refresh_token", "user_token", "user_refresh_token")


class TeamNotAllowed(PermissionError):
    """An install from a workspace outside ``SIGNOFF_SLACK_ALLOWED_TEAMS``."""


class Sealer:
    """AES-256-GCM with a key derived from ``SIGNOFF_SECRET_KEY``; the column name is the associated data."""

    def __init__(self, secret: str) -> None:
        self._aead = AESGCM(hashlib.sha256(b"signoff slack tokens\x00" + secret.encode()).digest())

    def seal(self, value: str, *, field: str) -> str:
        if value.startswith(PREFIX):
            return value
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, value.encode(), field.encode())
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, value: str, *, field: str) -> str:
        """The clear token; ``ValueError`` for one sealed under another key (or altered)."""
        if not value.startswith(PREFIX):
            raise ValueError(f"a Slack {field} is stored in clear")
        raw = base64.urlsafe_b64decode(value[len(PREFIX) :])
        try:
            return self._aead.decrypt(raw[:12], raw[12:], field.encode()).decode()
        except InvalidTag:
            raise ValueError(f"a Slack {field} does not open with SIGNOFF_SECRET_KEY") from None


class SealedInstallations(AsyncInstallationStore):
    """The SDK's SQLAlchemy store with an allow-list of teams and sealed tokens (see the module doc)."""

    def __init__(self, inner: AsyncSQLAlchemyInstallationStore, sealer: Sealer, allowed: frozenset[str] | None) -> None:
        self.inner = inner
        self.sealer = sealer
        self.allowed = allowed

    @property
    def logger(self) -> logging.Logger:
        return log

    def allows(self, team_id: str | None) -> bool:
        """Whether ``team_id`` may install and be served (every team when no allow-list is set)."""
        return self.allowed is None or (team_id or "") in self.allowed

    async def start(self) -> int:
        """Create the SDK's tables; seal any token an older version stored in clear. Returns how many."""
        await self.inner.create_tables()
        tables = {self.inner.bots: _TOKENS[:2], self.inner.installations: _TOKENS}
        count = await reseal(self.inner.engine, tables, lambda value, column: self.sealer.seal(value, field=column))
        if count:
            log.warning("sealed %d Slack tokens that were stored in clear", count)
        return count

    async def async_save(self, installation: Installation) -> None:
        if not self.allows(installation.team_id):
            log.warning(
                "refused a Slack install from team %s (not in SIGNOFF_SLACK_ALLOWED_TEAMS)", installation.team_id
            )
            raise TeamNotAllowed(f"team {installation.team_id} is not allowed")
        await self.inner.async_save(self._sealed(installation))

    async def async_save_bot(self, bot: Bot) -> None:
        if not self.allows(bot.team_id):
            raise TeamNotAllowed(f"team {bot.team_id} is not allowed")
        await self.inner.async_save_bot(self._sealed(bot))

    async def async_find_bot(
        self, *, enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None = False
    ) -> Bot | None:
        if not self.allows(team_id):
            return None
        bot = await self.inner.async_find_bot(
            enterprise_id=enterprise_id, team_id=team_id, is_enterprise_install=is_enterprise_install
        )
        return None if bot is None else self._opened(bot)

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        if not self.allows(team_id):
            return None
        found = await self.inner.async_find_installation(
            enterprise_id=enterprise_id, team_id=team_id, user_id=user_id, is_enterprise_install=is_enterprise_install
        )
        return None if found is None else self._opened(found)

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self.inner.async_delete_bot(enterprise_id=enterprise_id, team_id=team_id)

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        await self.inner.async_delete_installation(enterprise_id=enterprise_id, team_id=team_id, user_id=user_id)

    def _sealed(self, record: Any) -> Any:
        copy = _copy(record)
        for name in _TOKENS:
            value = getattr(copy, name, None)
            if value:
                setattr(copy, name, self.sealer.seal(value, field=name))
        return copy

    def _opened(self, record: Any) -> Any:
        for name in _TOKENS:
            value = getattr(record, name, None)
            if value:
                setattr(record, name, self.sealer.open(value, field=name))
        return record


def _copy(record: Any) -> Any:
    clone = object.__new__(type(record))
    clone.__dict__.update(record.__dict__)
    return clone
