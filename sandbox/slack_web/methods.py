"""The Web API methods the Slack face calls, as Slack answers them."""

from __future__ import annotations

from typing import Any

from sandbox.slack_web.records import (
    BOT_ID,
    MAX_STOP_BLOCKS,
    SlackError,
    _Message,
)
from sandbox.slack_web.state import SlackState


class SlackMethods(SlackState):
    """One handler per method (``chat.postMessage`` → ``_chat_postMessage``)."""

    # -- methods --------------------------------------------------------------------------
    def grant(self, code: str, *, team_id: str, token: str, bot_user_id: str = "U0SIGNOFF2") -> None:
        """An install of the app into ``team_id`` that Slack would finish with ``code``."""
        self.codes[code] = (team_id, token, bot_user_id)

    def _oauth_v2_access(self, args: dict[str, Any]) -> dict[str, Any]:
        grant = self.codes.pop(str(args["code"]), None)
        if grant is None:
            raise SlackError("invalid_code")
        team_id, token, bot_user = grant
        self.installed[token] = (team_id, bot_user)
        return {
            "access_token": token,
            "token_type": "bot",
            "scope": "chat:write,commands,app_mentions:read",
            "bot_user_id": bot_user,
            "app_id": "A0SIGNOFF",
            "team": {"id": team_id, "name": f"workspace {team_id}"},
            "enterprise": None,
            "is_enterprise_install": False,
            "authed_user": {"id": "U0INSTALLER"},
        }

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        if self._caller in self.installed:
            team_id, bot_user = self.installed[self._caller]
            return {
                "url": "https://other.slack.com/",
                "team": "other",
                "user": "signoff",
                "team_id": team_id,
                "user_id": bot_user,
                "bot_id": "B0SIGNOFF2",
                "is_enterprise_install": False,
            }
        return {
            "url": "https://signoff-test.slack.com/",
            "team": "signoff test",
            "user": "signoff",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args["channel"])
        text, blocks, markdown = self._content(args)
        thread_ts = args.get("thread_ts") or None
        msg = _Message(
            channel=channel,
            ts=self._next_ts(),
            thread_ts=thread_ts,
            user=self.bot_user_id,
            text=text,
            blocks=blocks,
            markdown=markdown,
        )
        self._messages[(channel, msg.ts)] = msg
        return {"channel": channel, "ts": msg.ts, "message": self._message_json(msg)}

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._own_message(args["channel"], args["ts"])
        text, blocks, markdown = self._content(args, require=False)
        if msg.state in ("streaming", "expired", "stopped"):
            # The update replaces what was streamed; the message is an ordinary one from now on.
            msg.markdown, msg.tasks, msg.blocks, msg.state = None, {}, [], "posted"
        if "text" in args:
            msg.text = text
        if "blocks" in args:
            msg.blocks = blocks
        if markdown is not None:
            msg.markdown, msg.blocks = markdown, []
        msg.edited = True
        return {"channel": msg.channel, "ts": msg.ts, "text": msg.text, "message": self._message_json(msg)}

    def _chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args["channel"])
        text, blocks, markdown = self._content(args)
        ts = self._next_ts()
        self.ephemeral.append(
            {
                "channel": channel,
                "user": args["user"],
                "ts": ts,
                "text": text,
                "blocks": blocks,
                "markdown": markdown,
                "thread_ts": args.get("thread_ts"),
            }
        )
        return {"message_ts": ts}

    def _chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._own_message(args["channel"], args["ts"])
        msg.state = "deleted"
        return {"channel": msg.channel, "ts": msg.ts}

    def _chat_startStream(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args["channel"])
        recipient = (args.get("recipient_user_id"), args.get("recipient_team_id"))
        if not self._is_dm(channel) and not all(recipient):
            raise SlackError(
                "invalid_arguments",
                response_metadata={"messages": ["recipient_user_id and recipient_team_id are required outside DMs"]},
            )
        mode = args.get("task_display_mode")
        if mode is not None and mode not in ("timeline", "plan"):
            raise SlackError("invalid_arguments")
        msg = _Message(
            channel=channel,
            ts=self._next_ts(),
            thread_ts=args["thread_ts"],
            user=self.bot_user_id,
            markdown="",
            state="streaming",
            started_at=self.clock(),
            recipient=recipient,
        )
        self._stream_content(msg, args)
        self._messages[(channel, msg.ts)] = msg
        return {"channel": channel, "ts": msg.ts}

    def _chat_appendStream(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._streaming(args)
        if args.get("markdown_text") is None and args.get("chunks") is None:
            raise SlackError("invalid_arguments")
        self._stream_content(msg, args)
        return {"channel": msg.channel, "ts": msg.ts}

    def _chat_stopStream(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._streaming(args)
        blocks = self._blocks(args.get("blocks"), limit=MAX_STOP_BLOCKS)
        self._stream_content(msg, args)
        msg.blocks, msg.state = blocks, "stopped"
        return {"channel": msg.channel, "ts": msg.ts, "message": self._message_json(msg)}

    def _assistant_threads_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        loading = args.get("loading_messages")
        if loading is not None and (
            not isinstance(loading, list) or len(loading) > 10 or not all(isinstance(x, str) for x in loading)
        ):
            raise SlackError("invalid_arguments")
        status = args["status"] if isinstance(args["status"], str) else ""
        self.statuses.append((args["channel_id"], args["thread_ts"], status))
        return {}

    def _assistant_threads_setSuggestedPrompts(self, args: dict[str, Any]) -> dict[str, Any]:
        prompts = args["prompts"]
        if (
            not isinstance(prompts, list)
            or not 1 <= len(prompts) <= 4
            or not all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts)
        ):
            raise SlackError("invalid_arguments")
        return {}

    def _assistant_threads_setTitle(self, args: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        view = self._view(args["view"], "modal")
        return {"view": view}

    def _views_publish(self, args: dict[str, Any]) -> dict[str, Any]:
        view = self._view(args["view"], "home")
        self.home[args["user_id"]] = view
        return {"view": view}

    def _views_update(self, args: dict[str, Any]) -> dict[str, Any]:
        view_id = args.get("view_id") or next(
            (v["id"] for v in self.views.values() if v.get("external_id") == args.get("external_id")), None
        )
        if view_id not in self.views:
            raise SlackError("not_found")
        kind = self.views[view_id]["type"]
        return {"view": self._view(args["view"], kind, view_id=view_id)}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(args["user"])
        if user is None:
            raise SlackError("user_not_found")
        return {"user": user}

    def _conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self.channels.get(args["channel"])
        if channel is None:
            raise SlackError("channel_not_found")
        return {"channel": channel}

    def _usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        if args["usergroup"] not in self.usergroups:
            raise SlackError("no_such_subteam")
        return {"users": list(self.usergroups[args["usergroup"]])}

    def _reactions_add(self, args: dict[str, Any]) -> dict[str, Any]:
        msg = self._messages.get((args["channel"], args["timestamp"]))
        if msg is None or msg.state == "deleted":
            raise SlackError("message_not_found")
        if args["name"] in msg.reactions:
            raise SlackError("already_reacted")
        msg.reactions.append(args["name"])
        return {}
