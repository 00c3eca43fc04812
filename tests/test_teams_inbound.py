"""Parsing inbound Teams activities into frozen records, with clear errors for anything else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from microsoft_agents.activity import ConversationReference

from bot.teams.inbound import (
    ActivityError,
    TeamsBotAdded,
    TeamsCardAction,
    TeamsIgnored,
    TeamsInstallation,
    TeamsMessage,
    parse_activity,
)
from tests.fakes.bot_connector import APP_ID, TENANT_ID, USER_AAD_ID, card_action_activity, message_activity

URL = "https://smba.trafficmanager.net/amer/"


def test_a_channel_message_names_team_channel_tenant_and_sender_and_loses_the_bot_mention() -> None:
    parsed = parse_activity(
        message_activity(
            service_url=URL, conversation_type="channel", mention_bot=True, text="assist C-7", replyToId="1700000000000"
        )
    )
    m = parsed.activity
    assert isinstance(m, TeamsMessage)
    assert m.text == "assist C-7" and m.mentioned_bot
    assert m.sender.aad_object_id == USER_AAD_ID and m.sender.id == "29:1user"
    assert m.place.conversation_type == "channel"
    assert (m.place.tenant_id, m.place.team_id, m.place.channel_id) == (
        TENANT_ID,
        "19:team@thread.tacv2",
        "19:chan@thread.tacv2",
    )
    assert m.reply_to_id == "1700000000000"
    assert m.place.bot_id == f"28:{APP_ID}"


def test_other_mentions_stay_as_names_and_html_entities_are_decoded() -> None:
    raw = message_activity(service_url=URL, mention_bot=True, text="ask <at>Dana</at> &amp; me")
    m = parse_activity(raw).activity
    assert isinstance(m, TeamsMessage) and m.text == "ask @Dana & me"


def test_a_personal_message_without_mention_is_a_message_not_mentioning_the_bot() -> None:
    m = parse_activity(message_activity(service_url=URL, text="  hi  ")).activity
    assert isinstance(m, TeamsMessage)
    assert (m.text, m.mentioned_bot, m.place.conversation_type) == ("hi", False, "personal")


def test_a_card_click_carries_verb_id_version_and_the_card_message_id() -> None:
    a = parse_activity(
        card_action_activity(service_url=URL, verb="signoff.approve", data={"id": "apr_9", "version": 3})
    ).activity
    assert isinstance(a, TeamsCardAction)
    assert (a.verb, a.target_id, a.version, a.comment, a.card_activity_id) == (
        "signoff.approve",
        "apr_9",
        3,
        None,
        "1700000000500",
    )


def test_a_rejection_carries_the_comment_typed_into_the_card() -> None:
    a = parse_activity(
        card_action_activity(
            service_url=URL, verb="signoff.reject", data={"id": "apr_9", "version": 3, "comment": " too high "}
        )
    ).activity
    assert isinstance(a, TeamsCardAction) and a.comment == "too high"


@pytest.mark.parametrize(
    ("verb", "data", "says"),
    [
        ("signoff.confirm", {"id": "cnf_1", "version": 1, "amount": 5}, "exactly"),
        ("signoff.confirm", {"id": "cnf_1", "version": "1"}, "exactly"),
        ("signoff.confirm", {"id": "cnf_1", "version": True}, "exactly"),
        ("signoff.confirm", {"id": "cnf_1", "version": 0}, "exactly"),
        ("signoff.confirm", {"id": "", "version": 1}, "exactly"),
        ("signoff.confirm", {"id": "a b<script>", "version": 1}, "exactly"),
        ("signoff.confirm", {"version": 1}, "exactly"),
        ("signoff.confirm", ["cnf_1", 1], "Action.Execute"),
        ("signoff.refund", {"id": "cnf_1", "version": 1}, "unknown card verb"),
        ("signoff.reject", {"id": "apr_1", "version": 1}, "needs a comment"),
        ("signoff.reject", {"id": "apr_1", "version": 1, "comment": "   "}, "needs a comment"),
        ("signoff.confirm", {"id": "cnf_1", "version": 1, "comment": "x"}, "only an approval"),
    ],
)
def test_card_data_must_be_exactly_id_and_version_for_our_verbs(verb: str, data: Any, says: str) -> None:
    with pytest.raises(ActivityError, match=says) as caught:
        parse_activity(card_action_activity(service_url=URL, verb=verb, data=data))
    assert caught.value.invoke


def test_an_invoke_that_is_not_a_card_action_is_an_invoke_error() -> None:
    raw = card_action_activity(service_url=URL)
    raw["name"] = "composeExtension/query"
    with pytest.raises(ActivityError) as caught:
        parse_activity(raw)
    assert caught.value.invoke


def test_the_bot_added_to_a_team_is_a_welcome_and_someone_else_added_is_ignored() -> None:
    raw = message_activity(
        service_url=URL, conversation_type="channel", type="conversationUpdate", membersAdded=[{"id": f"28:{APP_ID}"}]
    )
    raw.pop("text")
    assert isinstance(parse_activity(raw).activity, TeamsBotAdded)
    raw["membersAdded"] = [{"id": "29:someone"}]
    ignored = parse_activity(raw).activity
    assert isinstance(ignored, TeamsIgnored) and ignored.kind == "conversationUpdate"


@pytest.mark.parametrize(("action", "expected"), [("add", "add"), ("remove", "remove"), ("add-upgrade", "add")])
def test_installation_updates_say_add_or_remove(action: str, expected: str) -> None:
    raw = message_activity(service_url=URL, type="installationUpdate", action=action)
    a = parse_activity(raw).activity
    assert isinstance(a, TeamsInstallation) and a.action == expected


def test_typing_and_reactions_are_ignored_not_errors() -> None:
    for kind in ("typing", "messageReaction", "messageUpdate"):
        assert isinstance(parse_activity(message_activity(service_url=URL, type=kind)).activity, TeamsIgnored)


@pytest.mark.parametrize(
    ("mutate", "says"),
    [
        (lambda a: a.pop("conversation"), "conversation"),
        (lambda a: a.pop("from"), "from"),
        (lambda a: a.update(channelId="slack"), "msteams"),
        (lambda a: a.update(serviceUrl=42), "serviceUrl"),
        (lambda a: a.update(id=""), "id"),
        (lambda a: a.update(text="x" * 20_001), "text"),
        (lambda a: a["conversation"].update(conversationType="meeting"), "conversationType"),
    ],
)
def test_malformed_activities_are_a_clear_error(mutate: Any, says: str) -> None:
    raw = message_activity(service_url=URL)
    mutate(raw)
    with pytest.raises(ActivityError, match=says) as caught:
        parse_activity(raw)
    assert not caught.value.invoke


def test_a_body_that_is_not_an_object_is_an_error() -> None:
    with pytest.raises(ActivityError):
        parse_activity(["not", "an", "activity"])


def test_the_dedup_key_is_stable_per_activity_and_conversation() -> None:
    first = parse_activity(message_activity(service_url=URL)).activity.dedup_key
    again = parse_activity(message_activity(service_url=URL, text="redelivered")).activity.dedup_key
    other_conv = parse_activity(message_activity(service_url=URL, conversation_id="a:2")).activity.dedup_key
    other_id = parse_activity(message_activity(service_url=URL, activity_id="1700000000002")).activity.dedup_key
    assert first == again and first.startswith("teams:")
    assert len({first, other_conv, other_id}) == 3


def test_the_conversation_reference_is_json_that_the_sdk_reads_back() -> None:
    ref = parse_activity(message_activity(service_url=URL, conversation_type="channel")).reference
    back = ConversationReference.model_validate(json.loads(json.dumps(ref)))
    assert back.service_url == URL
    assert back.conversation.id == "19:chan@thread.tacv2;messageid=1700000000000"
    assert back.agent is not None and back.agent.id == f"28:{APP_ID}"
    assert back.user is not None and back.user.aad_object_id == USER_AAD_ID
    assert ref["activityId"] == "1700000000001" and ref["channelId"] == "msteams"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    key=st.sampled_from(
        [
            "type",
            "id",
            "from",
            "recipient",
            "conversation",
            "channelData",
            "entities",
            "value",
            "membersAdded",
            "text",
            "serviceUrl",
            "replyToId",
            "name",
            "action",
        ]
    ),
    junk=_json,
)
def test_any_junk_in_any_field_is_a_parse_result_or_an_activity_error_never_a_crash(key: str, junk: Any) -> None:
    raw = card_action_activity(service_url=URL) if key in ("value", "name") else message_activity(service_url=URL)
    raw[key] = junk
    try:
        parse_activity(raw)
    except ActivityError:
        pass
