"""Parsing inbound Teams activities at the trust boundary.

Pydantic models read only what we use from the Bot Framework activity JSON and
turn it into small frozen records: :class:`TeamsMessage`, :class:`TeamsCardAction`,
:class:`TeamsBotAdded`, :class:`TeamsInstallation`, or :class:`TeamsIgnored` for
activities we deliberately do nothing with. Anything malformed raises
:class:`ActivityError` with a message safe to return (the route answers 400).
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeAlias, cast, get_args

from microsoft_agents.activity import Activity
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

ConversationType = Literal["personal", "channel", "groupChat"]
Verb = Literal[
    "signoff.confirm",
    "signoff.decline",
    "signoff.approve",
    "signoff.reject",
    "signoff.takeover",
    "signoff.handback",
    "signoff.close",
    "signoff.suggestion.send",
]
VERBS: frozenset[str] = frozenset(get_args(Verb))
CARD_ACTION = "adaptiveCard/action"
MAX_TEXT = 20_000
MAX_COMMENT = 1_000

Id = Annotated[StrictStr, Field(min_length=1, max_length=512)]


class ActivityError(ValueError):
    """A malformed or unsupported activity. ``invoke`` tells the route to answer in invoke form."""

    def __init__(self, message: str, *, invoke: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.invoke = invoke


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class _Account(_Model):
    id: Id
    name: StrictStr | None = None
    aad_object_id: StrictStr | None = Field(default=None, alias="aadObjectId")


class _Conversation(_Model):
    id: Id
    conversation_type: ConversationType | None = Field(default=None, alias="conversationType")
    tenant_id: StrictStr | None = Field(default=None, alias="tenantId")


class _Ref(_Model):
    id: Id


class _ChannelData(_Model):
    tenant: _Ref | None = None
    team: _Ref | None = None
    channel: _Ref | None = None


class _Entity(_Model):
    type: StrictStr
    mentioned: _Account | None = None
    text: StrictStr | None = None


class _Envelope(_Model):
    type: StrictStr
    id: Id
    channel_id: Literal["msteams"] = Field(alias="channelId")
    service_url: Annotated[StrictStr, Field(min_length=8, max_length=2048)] = Field(alias="serviceUrl")
    from_: _Account = Field(alias="from")
    recipient: _Account
    conversation: _Conversation
    channel_data: _ChannelData | None = Field(default=None, alias="channelData")
    reply_to_id: StrictStr | None = Field(default=None, alias="replyToId")
    text: Annotated[StrictStr, Field(max_length=MAX_TEXT)] | None = None
    entities: list[_Entity] = Field(default_factory=list, max_length=200)
    name: StrictStr | None = None
    value: Any = None
    members_added: list[_Account] = Field(default_factory=list, alias="membersAdded", max_length=1000)
    action: StrictStr | None = None


class _ActionData(_Model):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: Annotated[StrictStr, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]
    version: Annotated[StrictInt, Field(ge=1)]
    #: The card's ``Input.Text`` (reject's reason) arrives merged into the data.
    comment: Annotated[StrictStr, Field(max_length=MAX_COMMENT)] | None = None


class _Action(_Model):
    type: Literal["Action.Execute"]
    verb: StrictStr
    data: dict[str, Any]


class _InvokeValue(_Model):
    action: _Action


# -- the records ----------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TeamsUser:
    """Who sent the activity: ``id`` is the channel id (``29:…``), ``aad_object_id`` the Entra
    object id that the dataset's ``teams_user_id`` holds."""

    id: str
    aad_object_id: str | None
    name: str | None


@dataclass(frozen=True, kw_only=True)
class TeamsPlace:
    """Where the activity happened."""

    conversation_id: str
    conversation_type: ConversationType
    tenant_id: str | None
    team_id: str | None
    channel_id: str | None
    service_url: str
    bot_id: str


@dataclass(frozen=True, kw_only=True)
class _Base:
    activity_id: str
    place: TeamsPlace
    sender: TeamsUser

    @property
    def dedup_key(self) -> str:
        """Stable per activity: the channel redelivers with the same activity and conversation id."""
        digest = hashlib.sha256(f"{self.place.conversation_id}\x1f{self.activity_id}".encode()).hexdigest()
        return f"teams:{digest[:40]}"


@dataclass(frozen=True, kw_only=True)
class TeamsMessage(_Base):
    """A message to the bot; ``text`` has the bot's own @mention removed."""

    text: str
    reply_to_id: str | None
    mentioned_bot: bool


@dataclass(frozen=True, kw_only=True)
class TeamsCardAction(_Base):
    """An ``Action.Execute`` click; ``card_activity_id`` is the message holding the card."""

    verb: Verb
    target_id: str
    version: int
    comment: str | None
    card_activity_id: str | None


@dataclass(frozen=True, kw_only=True)
class TeamsBotAdded(_Base):
    """The bot was added to a conversation (personal, team or group chat): say hello."""


@dataclass(frozen=True, kw_only=True)
class TeamsInstallation(_Base):
    """The app was installed or removed (``installationUpdate``)."""

    action: Literal["add", "remove"]


@dataclass(frozen=True, kw_only=True)
class TeamsIgnored(_Base):
    """An activity we answer 200 to and do nothing with (typing, reactions, other updates)."""

    kind: str


TeamsActivity: TypeAlias = TeamsMessage | TeamsCardAction | TeamsBotAdded | TeamsInstallation | TeamsIgnored


@dataclass(frozen=True, kw_only=True)
class Parsed:
    """A parsed activity and the conversation reference to store for proactive replies."""

    activity: TeamsActivity
    reference: dict[str, Any]


def parse_activity(raw: Any) -> Parsed:
    """Parse one inbound activity (decoded JSON) or raise :class:`ActivityError`."""
    if not isinstance(raw, dict):
        raise ActivityError("the body must be a JSON object (an activity)")
    try:
        env = _Envelope.model_validate(raw)
    except ValidationError as exc:
        raise ActivityError(_first_error(exc, raw)) from None
    base = _base(env)
    return Parsed(activity=_classify(env, base), reference=conversation_reference(raw))


def conversation_reference(raw: dict[str, Any]) -> dict[str, Any]:
    """The SDK's ``ConversationReference`` of an activity, as JSON to store."""
    try:
        ref = Activity.model_validate(raw).get_conversation_reference()
    except (ValidationError, ValueError, TypeError):
        raise ActivityError("the activity is not a valid Bot Framework activity") from None
    return ref.model_dump(mode="json", by_alias=True, exclude_none=True)


def _base(env: _Envelope) -> dict[str, Any]:
    data = env.channel_data or _ChannelData()
    kind = env.conversation.conversation_type or "personal"
    place = TeamsPlace(
        conversation_id=env.conversation.id,
        conversation_type=kind,
        tenant_id=(data.tenant.id if data.tenant else None) or env.conversation.tenant_id,
        team_id=data.team.id if data.team else None,
        channel_id=data.channel.id if data.channel else None,
        service_url=env.service_url,
        bot_id=env.recipient.id,
    )
    sender = TeamsUser(id=env.from_.id, aad_object_id=env.from_.aad_object_id, name=env.from_.name)
    return {"activity_id": env.id, "place": place, "sender": sender}


def _classify(env: _Envelope, base: dict[str, Any]) -> TeamsActivity:
    match env.type:
        case "message":
            text, mentioned = strip_bot_mention(env.text or "", env.entities, env.recipient.id)
            return TeamsMessage(**base, text=text, reply_to_id=env.reply_to_id, mentioned_bot=mentioned)
        case "invoke" if env.name == CARD_ACTION:
            return _card_action(env, base)
        case "conversationUpdate" if any(m.id == env.recipient.id for m in env.members_added):
            return TeamsBotAdded(**base)
        case "installationUpdate" if env.action in ("add", "remove", "add-upgrade", "remove-upgrade"):
            return TeamsInstallation(**base, action="add" if env.action.startswith("add") else "remove")
        case "invoke":
            raise ActivityError(f"unsupported invoke {env.name!r}", invoke=True)
    return TeamsIgnored(**base, kind=env.type)


def _card_action(env: _Envelope, base: dict[str, Any]) -> TeamsCardAction:
    try:
        value = _InvokeValue.model_validate(env.value)
    except ValidationError:
        raise ActivityError("the card action is not an Action.Execute with verb and data", invoke=True) from None
    verb = value.action.verb
    if verb not in VERBS:
        raise ActivityError(f"unknown card verb {verb[:64]!r}", invoke=True)
    try:
        data = _ActionData.model_validate(value.action.data)
    except ValidationError:
        raise ActivityError('the card data must be exactly {"id": str, "version": int}', invoke=True) from None
    comment = (data.comment or "").strip() or None
    if comment is not None and verb not in ("signoff.approve", "signoff.reject"):
        raise ActivityError("only an approval decision takes a comment", invoke=True)
    if verb == "signoff.reject" and comment is None:
        raise ActivityError("a rejection needs a comment", invoke=True)
    return TeamsCardAction(
        **base,
        verb=cast(Verb, verb),
        target_id=data.id,
        version=data.version,
        comment=comment,
        card_activity_id=env.reply_to_id,
    )


#: A mention's name is short: bounded, so many unclosed ``<at>`` never rescan the rest of the text each.
_AT = re.compile(r"<at>([^<]{0,256})</at>", re.IGNORECASE)
_SPACE = re.compile(r"[ \t\u00a0]+")


def strip_bot_mention(text: str, entities: list[_Entity], bot_id: str) -> tuple[str, bool]:
    """Remove the bot's own ``<at>…</at>`` mention(s); other mentions become ``@name``."""
    mentioned = False
    for e in entities:
        if e.type == "mention" and e.mentioned is not None and e.mentioned.id == bot_id:
            mentioned = True
            if e.text:
                text = text.replace(e.text, " ")
    text = _AT.sub(lambda m: "@" + m.group(1), text)
    text = html.unescape(text)
    lines = [_SPACE.sub(" ", line).strip() for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join(lines).strip(), mentioned


def _first_error(exc: ValidationError, raw: dict[str, Any]) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "activity"
    if where == "channelId" and "channelId" in raw:
        return "only Microsoft Teams activities (channelId msteams) are accepted"
    return f"invalid activity: {where}: {err['msg']}"[:300]
