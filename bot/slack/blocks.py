"""Block Kit for every message, modal and Home tab the Slack face shows. Pure functions.

Inputs are storage records and the frozen view-models of ``view_models.py``;
outputs are :class:`Outbound` messages (fallback ``text`` + ``blocks``) or view
payloads, built with ``slack_sdk.models`` so the SDK's validators check Slack's
limits when ``to_dict()`` runs. Every word a person reads comes from
``wording.py`` or from the record's exact fields; text others wrote (names,
evidence, comments, the model's rationale) is escaped and clipped by
``mrkdwn.clip`` and the rationale is always labelled as unverified.

Sizes are budgeted so that even absurd inputs stay inside Slack's limits: 50
blocks a message (100 a view), 3,000 characters a section, and the
undocumented ~12,000-character cap on all the text of a message's blocks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    InputBlock,
    MarkdownTextObject,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from agent.views import ApprovalView, ConfirmationView, EscalationView, OutcomeView, ShadowView, TraceView
from bot.slack import ids, wording
from bot.slack.mrkdwn import channel_link, clip, clip_plain, code, date, one_line, subteam
from bot.slack.view_models import AssistThread, Directory, Outbound

MAX_MESSAGE_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
SECTION_CHARS = 3000
FIELD_CHARS = 2000
MARKDOWN_CHARS = 12_000
MESSAGE_TEXT_CHARS = 40_000
#: What we allow ourselves of the ~12k cumulative block-text cap (with a buffer).
TEXT_BUDGET = 11_000
#: One piece of a long answer (leaves room in the last message for a card).
EVIDENCE_SHOWN = 5
PROVENANCE_SHOWN = 10
TRACE_STEPS_PER_MESSAGE = 10


def _md(text: str) -> MarkdownTextObject:
    # verbatim: no auto-linking of bare URLs or #channel names in text we embed.
    return MarkdownTextObject(text=text, verbatim=True)


def _section(text: str) -> Block:
    return SectionBlock(text=_md(text))


def context_block(*texts: str) -> Block:
    return ContextBlock(elements=[_md(t) for t in texts])


def _header(text: str) -> Block:
    return HeaderBlock(text=PlainTextObject(text=clip_plain(text, 150)))


def _dump(blocks: Sequence[Block]) -> tuple[dict[str, Any], ...]:
    return tuple(b.to_dict() for b in blocks)


def _button(
    label: str, action_id: str, value: str, style: str | None = None, confirm: ConfirmObject | None = None
) -> ButtonElement:
    return ButtonElement(
        text=PlainTextObject(text=label), action_id=action_id, value=value, style=style, confirm=confirm
    )


# -- confirmation card ----------------------------------------------------------------
def confirmation_card(c: ConfirmationView, *, directory: Directory | None = None) -> Outbound:
    """The card that asks the acting principal to confirm, or shows what they decided.

    It may be read by another organisation (Slack Connect), so it shows the
    action's summary, the outcome and a mention of who decided — nothing else.
    """
    summary = clip(c.summary, 500)
    if c.open:
        confirm = None
        if c.moves_money:
            confirm = ConfirmObject(
                title=wording.CONFIRM_DIALOG_TITLE,
                text=clip(c.summary, 280),
                confirm=wording.CONFIRM_DIALOG_YES,
                deny=wording.CONFIRM_DIALOG_NO,
            )
        value = ids.encode_value(c.id, c.version)
        blocks = [
            _section(f"*{wording.CONFIRM_HEADER}:* {summary}"),
            context_block(wording.CONFIRM_NOTHING_YET),
            ActionsBlock(
                block_id=ids.CONFIRMATION_ACTIONS_BLOCK,
                elements=[
                    _button(wording.CONFIRM_BUTTON, ids.CONFIRM, value, "primary", confirm),
                    _button(wording.DECLINE_BUTTON, ids.DECLINE, value),
                ],
            ),
        ]
        return Outbound(text=wording.CONFIRM_FALLBACK.format(summary=summary), blocks=_dump(blocks))
    outcome = wording.CONFIRMATION_OUTCOME.get(str(c.status), str(c.status).capitalize())
    # Only the principal's own decisions name them; a replacement is nobody's click.
    acted = c.status in ("confirmed", "consumed", "declined")
    who = (directory or Directory()).who_public(c.principal.key) if acted else None
    when = date(c.decided_at) if c.decided_at else None
    line = (
        wording.CONFIRMATION_BY.format(outcome=outcome, who=who, when=when)
        if who and when
        else wording.CONFIRMATION_WHEN.format(outcome=outcome, when=when)
        if when
        else outcome
    )
    blocks = [_section(f"~{summary}~" if c.status in ("declined", "superseded") else summary), context_block(line)]
    note = wording.CONFIRMATION_NOTE.get(str(c.status))
    if c.awaiting_approval and c.status in ("confirmed", "consumed"):
        note = wording.CONFIRMATION_AWAITING_APPROVAL
    elif c.outcome is not None:
        note = outcome_text(c.outcome)
    if note:
        blocks.append(context_block(note))
    return Outbound(
        text=wording.CONFIRMATION_DECIDED_FALLBACK.format(outcome=outcome, summary=summary), blocks=_dump(blocks)
    )


# -- approval card -----------------------------------------------------------------------
def approval_card(a: ApprovalView, *, directory: Directory | None = None) -> Outbound:
    """The supervisor's card: the exact action, why it was routed, the evidence, where each
    value came from, the model's (unverified) rationale, and Approve/Reject while it is open
    — or, once decided or expired, the outcome, who decided and when, the comment and what
    execution did."""
    people = directory or Directory()
    summary = clip(a.summary, 500)
    if a.open:
        header = wording.APPROVAL_HEADER_SECOND if a.approvals_so_far else wording.APPROVAL_HEADER
        blocks = [_header(header), _section(f"*{summary}*"), _fields(a, people)]
        blocks += _progress(a, people)
        blocks += [DividerBlock(), *_evidence(a), _provenance(a), *_rationale(a), _approval_actions(a)]
        return Outbound(text=wording.APPROVAL_FALLBACK.format(summary=summary), blocks=_dump(blocks))
    outcome = wording.APPROVAL_HEADER_DECIDED[a.state]
    blocks = [_header(outcome), _section(f"*{summary}*"), _fields(a, people), *_outcome(a, people)]
    return Outbound(
        text=wording.APPROVAL_DECIDED_FALLBACK.format(outcome=outcome, summary=summary), blocks=_dump(blocks)
    )


def _fields(a: ApprovalView, people: Directory) -> Block:
    pairs = [
        (wording.FIELD_REQUESTER, people.who(a.requester.key, a.requester.name)),
        (wording.FIELD_ACCOUNT, clip(a.customer_id or wording.NO_ACCOUNT, 100)),
    ]
    amount = _amount(a)
    if amount:
        pairs.append((wording.FIELD_AMOUNT, amount))
    if a.reason_text:
        pairs.append((wording.FIELD_ROUTING, clip(a.reason_text, 300)))
    pairs += [(wording.FIELD_EXPIRES, date(a.expires_at)), (wording.FIELD_POLICY, clip(a.policy_version, 60))]
    return SectionBlock(fields=[_md(f"*{label}*\n{value}") for label, value in pairs])


def _amount(a: ApprovalView) -> str | None:
    if a.amount is None:
        return None
    shown = clip(a.amount, 40)
    if a.ceiling is None:
        return shown
    ceiling = clip(a.ceiling, 40)
    if a.aggregate is not None:
        return wording.AMOUNT_WITH_AGGREGATE.format(amount=shown, ceiling=ceiling, aggregate=clip(a.aggregate, 40))
    return wording.AMOUNT_AGAINST_CEILING.format(amount=shown, ceiling=ceiling)


def _progress(a: ApprovalView, people: Directory) -> list[Block]:
    if a.approvals_required < 2:
        return []
    done = [d for d in a.decisions if d.decision == "approve"]
    if not done:
        return [context_block(wording.PROGRESS.format(done=0, required=a.approvals_required))]
    who = ", ".join(people.who(d.actor.key, d.actor.name) for d in done[:3])
    return [context_block(wording.PROGRESS_WAITING.format(done=len(done), required=a.approvals_required, who=who))]


def _evidence(a: ApprovalView) -> list[Block]:
    if not a.evidence:
        return [_section(f"*{wording.EVIDENCE_HEADING}*\n{wording.EVIDENCE_NONE}")]
    blocks: list[Block] = []
    for i, item in enumerate(a.evidence[:EVIDENCE_SHOWN]):
        title = clip(one_line(item.title or item.id), 150)
        ref = clip(one_line(item.id).replace("`", "ˋ"), 100)
        excerpt = clip(one_line(item.excerpt or ""), 400)
        text = f"• *{title}* `{ref}`" + (f"\n>{excerpt}" if excerpt else "")
        blocks.append(_section(f"*{wording.EVIDENCE_HEADING}*\n{text}" if i == 0 else text))
    if len(a.evidence) > EVIDENCE_SHOWN:
        blocks.append(context_block(wording.EVIDENCE_MORE.format(count=len(a.evidence) - EVIDENCE_SHOWN)))
    return blocks


def _provenance(a: ApprovalView) -> Block:
    lines = []
    for arg in a.arguments[:PROVENANCE_SHOWN]:
        origin = wording.PROVENANCE.get(str(arg.source), wording.PROVENANCE_UNKNOWN)
        lines.append(f"• `{clip(arg.name, 40).replace('`', 'ˋ')}` = {clip(one_line(arg.value), 120)} — {origin}")
    if len(a.arguments) > PROVENANCE_SHOWN:
        lines.append(wording.PROVENANCE_MORE.format(count=len(a.arguments) - PROVENANCE_SHOWN))
    return _section(f"*{wording.PROVENANCE_HEADING}*\n" + "\n".join(lines or ["—"]))


def _rationale(a: ApprovalView) -> list[Block]:
    if not a.rationale:
        return []
    quoted = ">" + clip(a.rationale, 1400).replace("\n", "\n>")
    return [context_block(f"_{wording.RATIONALE_LABEL}_"), _section(quoted)]


def _approval_actions(a: ApprovalView, block_id: str = ids.APPROVAL_ACTIONS_BLOCK) -> Block:
    value = ids.encode_value(a.id, a.version)
    return ActionsBlock(
        block_id=block_id,
        elements=[
            _button(wording.APPROVE_BUTTON, ids.APPROVE, value, "primary"),
            _button(wording.REJECT_BUTTON, ids.REJECT, value, "danger"),
        ],
    )


def _outcome(a: ApprovalView, people: Directory) -> list[Block]:
    lines = _decision_lines(a, people) + _closing_lines(a)
    blocks: list[Block] = [_section("\n".join(lines))] if lines else []
    if a.outcome is not None:
        blocks.append(_section(outcome_text(a.outcome)))
    return blocks


def _decision_lines(a: ApprovalView, people: Directory) -> list[str]:
    """Who decided and when (each decision of a two-person approval), with comments."""
    lines: list[str] = []
    for d in a.decisions[:5]:
        when = date(d.at) if d.at else "—"
        lines.append(wording.DECISION_LINE[d.decision].format(who=people.who(d.actor.key, d.actor.name), when=when))
        if d.comment:
            lines.append(wording.COMMENT.format(comment=clip(one_line(d.comment), 500)))
    if not a.decisions and a.state in ("approved", "rejected"):
        outcome = wording.APPROVAL_HEADER_DECIDED[a.state]
        who = people.who(a.decider.key, a.decider.name) if a.decider else people.who(None)
        when = date(a.decided_at) if a.decided_at else "—"
        lines.append(wording.DECIDED_BY.format(outcome=outcome, who=who, when=when))
    if a.comment and not any(d.comment for d in a.decisions):
        lines.append(wording.COMMENT.format(comment=clip(one_line(a.comment), 500)))
    return lines


def _closing_lines(a: ApprovalView) -> list[str]:
    if a.state == "expired":
        return [wording.EXPIRED_NOTE + f" · {date(a.decided_at or a.expires_at)}"]
    if a.state == "superseded":
        return [
            wording.SUPERSEDED_BY.format(id=clip(a.superseded_by, 80)) if a.superseded_by else wording.SUPERSEDED_NOTE
        ]
    return []


def outcome_text(outcome: OutcomeView) -> str:
    """What execution did, in words: the tool's own phrase and the id it produced, a replay, or
    why nothing was done."""
    label = clip(outcome.label, 300)
    ref = clip(outcome.reference, 80).replace("`", "ˋ") if outcome.reference else None
    match outcome.kind:
        case "replayed":
            line = (
                wording.RESULT_REPLAYED.format(when=date(outcome.at)) if outcome.at else wording.RESULT_REPLAYED_NO_TIME
            )
            return f"{line} ({label}{f' · `{ref}`' if ref else ''})"
        case "failed":
            detail = f" (`{clip(outcome.detail, 64).replace('`', 'ˋ')}`)" if outcome.detail else ""
            return f"{label}{detail}"
        case "reopened":
            return f"{label}{f' (`{ref}`)' if ref else ''}"
        case "done":
            return f"{label}{f' · `{ref}`' if ref else ''}"
        case _:
            detail = f": {clip(outcome.detail, 60)}" if outcome.detail else ""
            return f"{label}{detail}"


# -- reject modal ------------------------------------------------------------------------
def reject_modal(a: ApprovalView, *, channel: str | None = None, ts: str | None = None) -> dict[str, Any]:
    """The ``views.open`` payload asking why; ``private_metadata`` carries only id, version
    and the card's coordinates so the submission can redraw it."""
    meta = ids.encode_modal_metadata(ids.ModalRef(id=a.id, version=a.version, channel=channel, ts=ts))
    view = View(
        type="modal",
        callback_id=ids.REJECT_MODAL,
        private_metadata=meta,
        title=PlainTextObject(text=wording.REJECT_MODAL_TITLE),
        submit=PlainTextObject(text=wording.REJECT_MODAL_SUBMIT),
        close=PlainTextObject(text=wording.REJECT_MODAL_CLOSE),
        blocks=[
            _section(wording.REJECT_MODAL_INTRO.format(summary=clip(a.summary, 500))),
            InputBlock(
                block_id=ids.REJECT_COMMENT_BLOCK,
                label=PlainTextObject(text=wording.REJECT_MODAL_LABEL),
                element=PlainTextInputElement(
                    action_id=ids.REJECT_COMMENT_INPUT,
                    multiline=True,
                    min_length=1,
                    max_length=2000,
                    placeholder=PlainTextObject(text=wording.REJECT_MODAL_PLACEHOLDER),
                ),
            ),
        ],
    )
    return view.to_dict()


# -- App Home --------------------------------------------------------------------------
def home_view(
    *,
    queue: Sequence[ApprovalView] | None = None,
    threads: Sequence[AssistThread] | None = None,
    directory: Directory | None = None,
    pending_total: int | None = None,
) -> dict[str, Any]:
    """The Home tab: a supervisor's queue (pending approvals, newest first, as compact cards
    with buttons) and/or a rep's open assist threads; an empty state when both are empty.
    ``pending_total`` is how many are pending in all, when ``queue`` is only the first page."""
    if queue is None and threads is None:
        return View(type="home", blocks=[_section(wording.HOME_EMPTY)]).to_dict()
    mine = _thread_list(threads) if threads is not None else []
    blocks = []
    if queue is not None:
        blocks = _queue(queue, directory or Directory(), pending_total, room=MAX_VIEW_BLOCKS - len(mine))
    return View(type="home", blocks=blocks + mine).to_dict()


def _queue(queue: Sequence[ApprovalView], people: Directory, total: int | None, room: int) -> list[Block]:
    pending = sorted((a for a in queue if a.open), key=lambda a: a.created_at, reverse=True)
    total = max(total or 0, len(pending))
    if not pending:
        return [_header(wording.HOME_QUEUE_HEADER), _section(wording.HOME_QUEUE_EMPTY)]
    blocks: list[Block] = [_header(wording.HOME_QUEUE_HEADER)]
    fits = max((room - len(blocks) - 1) // 4, 0)
    for a in pending[:fits]:
        who = people.who(a.requester.key, a.requester.name)
        line = f"*{clip(a.summary, 300)}*\n{who} · {wording.FIELD_EXPIRES} {date(a.expires_at)}"
        blocks += [
            _section(line),
            *_progress(a, people),
            _approval_actions(a, ids.approval_actions_block(a.id)),
            DividerBlock(),
        ]
    shown = min(fits, len(pending))
    if total > shown:
        blocks.append(context_block(wording.HOME_QUEUE_MORE.format(count=total - shown)))
    return blocks


def _thread_list(threads: Sequence[AssistThread]) -> list[Block]:
    if not threads:
        return [_header(wording.HOME_THREADS_HEADER), _section(wording.HOME_THREADS_EMPTY)]
    lines = []
    for t in threads[:20]:
        customer = clip(one_line(f"{t.customer_name} ({t.customer_id})" if t.customer_name else t.customer_id), 120)
        lines.append(
            "• "
            + wording.HOME_THREAD_LINE.format(
                customer=customer, channel=channel_link(t.channel), ts=f"`{clip(t.thread_ts, 24)}`"
            )
        )
    if len(threads) > 20:
        lines.append(wording.HOME_THREADS_MORE.format(count=len(threads) - 20))
    return [_header(wording.HOME_THREADS_HEADER), _section("\n".join(lines))]


# -- shadow suggestion ---------------------------------------------------------------------
def shadow_card(v: ShadowView, *, directory: Directory | None = None, in_thread: bool = False) -> Outbound:
    """The agent's proposal in shadow as staff see it: marked "shadow: not executed", the exact
    action from its stored arguments, who asked, the account and the amount. No buttons: there
    is nothing to approve. ``in_thread``: the short form for the assist thread."""
    summary = clip(v.summary, 500)
    header = _header(wording.SHADOW_HEADER.format(label=v.label))
    fallback = wording.SHADOW_FALLBACK.format(label=v.label, summary=summary)
    if in_thread:
        blocks = [header, _section(f"*{summary}*"), context_block(wording.SHADOW_THREAD_NOTE)]
        return Outbound(text=fallback, blocks=_dump(blocks))
    people = directory or Directory()
    pairs = [
        (wording.FIELD_REQUESTER, people.who(v.requester.key, v.requester.name)),
        (wording.FIELD_ACCOUNT, clip(v.customer_id or wording.NO_ACCOUNT, 100)),
        *([(wording.FIELD_AMOUNT, clip(v.amount, 40))] if v.amount else []),
        (wording.SHADOW_WOULD_NEED, clip(v.would_need, 200)),
        (wording.ESCALATION_CONVERSATION, f"`{clip(v.conversation_id, 100)}` ({clip(v.channel, 40)})"),
        (wording.FIELD_POLICY, clip(v.policy_version, 60)),
    ]
    args = [f"• `{clip(a.name, 40).replace('`', 'ˋ')}` = {clip(one_line(a.value), 120)}" for a in v.arguments]
    blocks = [
        header,
        _section(f"*{summary}*"),
        SectionBlock(fields=[_md(f"*{label}*\n{value}") for label, value in pairs]),
        _section(f"*{wording.SHADOW_ARGUMENTS}*\n" + "\n".join(args[:PROVENANCE_SHOWN] or ["—"])),
        context_block(wording.SHADOW_NOTE),
    ]
    return Outbound(text=fallback, blocks=_dump(blocks))


# -- escalation and trace ------------------------------------------------------------------
def escalation_message(e: EscalationView, *, oncall_group: str | None = None) -> Outbound:
    """The post in the escalation channel: the agent's reason and summary (labelled as
    its words), the customer and conversation, and a ping of the on-call group."""
    reason, summary = clip(one_line(e.reason), 300), clip(e.summary, 2000)
    blocks: list[Block] = [
        _header(wording.ESCALATION_HEADER),
        _section(wording.ESCALATION_REASON.format(reason=reason)),
        _section(wording.ESCALATION_SUMMARY.format(summary=summary)),
        SectionBlock(
            fields=[
                _md(f"*{wording.ESCALATION_CUSTOMER}*\n{clip(e.customer_id or wording.NO_ACCOUNT, 100)}"),
                _md(f"*{wording.ESCALATION_CONVERSATION}*\n`{clip(e.conversation_id, 100)}`"),
            ]
        ),
    ]
    group = subteam(oncall_group)
    if group:
        blocks.append(_section(wording.ESCALATION_PING.format(group=group)))
    blocks.append(context_block(wording.ESCALATION_TRACE_FOLLOWS))
    return Outbound(text=wording.ESCALATION_FALLBACK.format(reason=reason), blocks=_dump(blocks))


def trace_messages(steps: Sequence[TraceView]) -> list[Outbound]:
    """The trace as thread replies: each tool call, its gate decision and a short result
    excerpt (escaped, in a code block), several messages when there are many."""
    if not steps:
        return [Outbound(text=wording.TRACE_EMPTY, blocks=_dump([_section(wording.TRACE_EMPTY)]))]
    out = []
    total = len(steps)
    for start in range(0, total, TRACE_STEPS_PER_MESSAGE):
        chunk = steps[start : start + TRACE_STEPS_PER_MESSAGE]
        first, last = start + 1, start + len(chunk)
        blocks = [context_block(wording.TRACE_HEADER.format(first=first, last=last, total=total))]
        blocks += [_section(_trace_line(first + i, s)) for i, s in enumerate(chunk)]
        out.append(
            Outbound(text=wording.TRACE_FALLBACK.format(first=first, last=last, total=total), blocks=_dump(blocks))
        )
    return out


def _trace_line(n: int, s: TraceView) -> str:
    gate = wording.GATE.get(s.decision or "", wording.GATE_UNDECIDED)
    line = f"*{n}.* `{clip(s.tool, 64).replace('`', 'ˋ')}` — {gate}{wording.TRACE_ERROR if s.is_error else ''}"
    if s.reason:
        line += f" · {clip(one_line(s.reason), 200)}"
    if s.result not in (None, ""):
        shown = s.result if isinstance(s.result, str) else json.dumps(s.result, ensure_ascii=False, default=str)
        line += "\n" + code(shown[:2000], 600)
    return line


__all__ = [
    "MAX_MESSAGE_BLOCKS",
    "MAX_VIEW_BLOCKS",
    "TEXT_BUDGET",
    "approval_card",
    "confirmation_card",
    "escalation_message",
    "home_view",
    "reject_modal",
    "outcome_text",
    "trace_messages",
]
