"""The Slack face's shared parts: its configuration, its client, and who a Slack user is.

:class:`SlackFace` is built once by the composition root. The Bolt app
(``bot/slack/bolt.py``) only authenticates, deduplicates and persists what Slack
sends; the worker side (``bot/slack/turns.py``, ``bot/slack/clicks.py``) acts on it;
``bot/slack/replies.py`` and ``bot/slack/notifier.py`` send. Nothing here decides
an action: the runtime does.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from slack_sdk.web.async_client import AsyncWebClient

from agent.audit_budget import AuditBudget
from agent.face_port import FacePort
from bot.slack.config import SlackConfig
from bot.slack.sender import SenderConfig, SlackSender, SlackSendError, make_client
from bot.slack.view_models import Directory
from tools.backend import CommerceBackend
from tools.context import Principal

log = logging.getLogger(__name__)

#: The conversations' channel name for everything that came through Slack.
CHANNEL = "slack"
#: How long a user group's member list is trusted before it is read again.
GROUP_TTL_S = 60.0


Kind = Literal["rep", "supervisor", "customer", "stranger"]


@dataclass(frozen=True, kw_only=True)
class Person:
    """A Slack user as signoff sees them: staff (with a role), a customer, or a stranger."""

    user: str
    team: str
    kind: Kind
    #: The staff id (``S-3``) or the customer id (``C-7``); for strangers, nothing.
    id: str | None = None
    external: bool = False

    @property
    def is_staff(self) -> bool:
        return self.kind in ("rep", "supervisor")

    @property
    def slack_key(self) -> str:
        """The user's identity across workspaces: ``TEAM:USER``."""
        return f"{self.team}:{self.user}"

    def principal(self, customer_id: str | None = None) -> Principal:
        """The principal this person acts as (staff bound to ``customer_id`` in an assist thread)."""
        if self.kind in ("rep", "supervisor"):
            return Principal(kind=self.kind, id=str(self.id), customer_id=customer_id)
        if self.kind == "customer":
            return Principal(kind="customer", id=str(self.id), customer_id=self.id)
        # Not linked: a customer with no account — knowledge answers only, no account tools.
        # Every such user of one workspace shares the workspace's budget (policy ``strangers``).
        return Principal(
            kind="customer", id=f"slack-{self.team}-{self.user}", customer_id=None, group=f"slack-team:{self.team}"
        )


@dataclass
class SlackFace:
    """The Slack face's collaborators, shared by the Bolt app, the worker side and the notifier."""

    config: SlackConfig
    port: FacePort
    backend: CommerceBackend
    client: AsyncWebClient
    sender: SlackSender
    #: Sends the link codes when SMTP is configured (else they go to the store's outbox).
    mailer: Any = None
    #: Our own workspace and bot user, from ``auth.test`` (read once).
    team_id: str | None = None
    bot_user_id: str | None = None
    _groups: dict[str, tuple[float, frozenset[str]]] = field(default_factory=dict)
    #: Who has their App Home open in this process (user → team): republished when the queue moves.
    home_viewers: dict[str, str] = field(default_factory=dict)
    #: With the OAuth install flow: the SDK's SQLAlchemy installation and state stores, in our database.
    installations: Any = None
    oauth_states: Any = None
    _teams: dict[str, SlackFace] = field(default_factory=dict)
    #: Feedback votes and refused clicks audited per person (past it: answered, not audited).
    click_audit: AuditBudget = field(default_factory=AuditBudget)

    @classmethod
    def build(
        cls, config: SlackConfig, port: FacePort, backend: CommerceBackend, mailer: Any = None, *, engine: Any = None
    ) -> SlackFace:
        """``engine``: the database's, where the OAuth install flow keeps its stores (with ``client_id``)."""
        client = make_client(config.bot_token or "", config.base_url)
        sender = SlackSender(client, SenderConfig(min_interval_s=config.min_interval_s))
        face = cls(config=config, port=port, backend=backend, client=client, sender=sender, mailer=mailer)
        if config.client_id:
            from slack_sdk.oauth.installation_store.sqlalchemy import AsyncSQLAlchemyInstallationStore
            from slack_sdk.oauth.state_store.sqlalchemy import AsyncSQLAlchemyOAuthStateStore

            from bot.slack.installations import SealedInstallations, Sealer

            if not config.secret_key:
                raise ValueError("SIGNOFF_SECRET_KEY: required with SLACK_CLIENT_ID (tokens are encrypted at rest)")
            face.installations = SealedInstallations(
                AsyncSQLAlchemyInstallationStore(client_id=config.client_id, engine=engine),
                Sealer(config.secret_key),
                config.allowed_teams,
            )
            face.oauth_states = AsyncSQLAlchemyOAuthStateStore(expiration_seconds=600, engine=engine)
        return face

    async def start(self) -> None:
        """Create the OAuth stores' tables when missing (the SDK's own schema, in our database)."""
        if self.installations is not None:
            await self.installations.start()
            await self.oauth_states.create_tables()

    async def for_team(self, team: str | None) -> SlackFace:
        """This face speaking as the bot installed in ``team`` (OAuth); itself for its own team."""
        if self.installations is None or not team or (self.config.bot_token and team == (await self.who_am_i())[0]):
            return self
        known = self._teams.get(team)
        if known is not None:
            return known
        bot = await self.installations.async_find_bot(enterprise_id=None, team_id=team)
        if bot is None or not bot.bot_token:
            raise LookupError(f"no Slack installation for team {team}")
        client = make_client(bot.bot_token, self.config.base_url)
        face = SlackFace(
            config=self.config,
            port=self.port,
            backend=self.backend,
            client=client,
            sender=SlackSender(client, SenderConfig(min_interval_s=self.config.min_interval_s)),
            mailer=self.mailer,
            team_id=team,
            bot_user_id=bot.bot_user_id,
            installations=self.installations,
            oauth_states=self.oauth_states,
        )
        self._teams[team] = face
        return face

    async def close(self) -> None:
        await self.sender.aclose()
        for face in self._teams.values():
            await face.sender.aclose()

    async def who_am_i(self) -> tuple[str | None, str | None]:
        """Our team and bot user ids (``auth.test``, once; ``None`` while Slack is unreachable)."""
        if self.team_id is None:
            try:
                auth = await self.sender.call("auth.test", lambda: self.client.auth_test())
            except SlackSendError as exc:
                log.warning("slack auth.test failed: %s", exc.error)
                return None, None
            self.team_id, self.bot_user_id = auth.get("team_id"), auth.get("user_id")
        return self.team_id, self.bot_user_id

    # -- who is this ------------------------------------------------------------------------
    async def person(self, *, user: str, team: str, external: bool) -> Person:
        """Who ``user`` of ``team`` is. Anyone from another organisation is never staff; a
        look-up that fails counts against the user (fail closed)."""
        own, _ = await self.who_am_i()
        external = external or own is None or team != own
        on_file = await self.port.identify(CHANNEL, user)
        if on_file is not None and on_file.staff is not None and not external:
            in_group = await self.in_supervisor_group(user)
            role: Kind = "supervisor" if on_file.role == "supervisor" or in_group else "rep"
            return Person(user=user, team=team, kind=role, id=on_file.id)
        if on_file is not None and on_file.kind == "customer":
            return Person(user=user, team=team, kind="customer", id=on_file.id, external=external)
        linked = await self.port.identify(CHANNEL, f"{team}:{user}")
        if linked is not None and linked.kind == "customer":
            return Person(user=user, team=team, kind="customer", id=linked.id, external=external)
        return Person(user=user, team=team, kind="stranger", external=external)

    async def in_supervisor_group(self, user: str) -> bool:
        """Whether ``user`` is in ``SIGNOFF_SLACK_SUPERVISOR_GROUP`` (false when unset or unreadable)."""
        group = self.config.supervisor_group
        if not group:
            return False
        cached = self._groups.get(group)
        if cached is None or time.monotonic() - cached[0] > GROUP_TTL_S:
            try:
                data = await self.sender.call(
                    "usergroups.users.list", lambda: self.client.usergroups_users_list(usergroup=group)
                )
            except SlackSendError as exc:
                log.warning("slack user group %s unreadable: %s", group, exc.error)
                return False
            cached = (time.monotonic(), frozenset(str(u) for u in data.get("users") or ()))
            self._groups[group] = cached
        return user in cached[1]

    async def directory(self, *keys: str | None) -> Directory:
        """Who the principal keys on a card are in Slack (staff on file are mentioned)."""
        slack_ids: dict[str, str] = {}
        names: dict[str, str] = {}
        for key in {k for k in keys if k}:
            kind, _, ident = key.partition(":")
            if kind in ("rep", "supervisor"):
                staff = await self.port.staff(ident)
                if staff is not None and staff.slack_user_id:
                    slack_ids[key] = staff.slack_user_id
                elif staff is not None:
                    names[key] = staff.name
        return Directory(slack_ids=slack_ids, names=names)


def thread_ref(team: str, channel: str, thread_ts: str) -> str:
    """A Slack thread's identity: ``slack:TEAM:CHANNEL:THREAD_TS``."""
    return f"slack:{team}:{channel}:{thread_ts}"


def parse_ref(ref: str | None) -> tuple[str, str, str] | None:
    """(team, channel, thread_ts) of a conversation's ``external_ref`` made by this face."""
    if not ref or not ref.startswith("slack:"):
        return None
    parts = ref.split(":")
    if len(parts) < 4:
        return None
    return parts[1], parts[2], parts[3]
