"""Everything the Slack face says in its own voice, in one place.

The agent's answers are the model's; these are ours: card labels, refusals,
prompts and error texts. None of them ever includes an exception's text —
errors are logged, people get a sentence that helps them.

Templates take ``str.format`` fields; the builders in ``blocks.py`` fill them
with text that is already escaped (or ids we validated).
"""

from __future__ import annotations

# -- confirmation card (may be read by another organisation: nothing internal) ----------
CONFIRM_HEADER = "Please confirm"
CONFIRM_NOTHING_YET = "Nothing happens until you confirm."
CONFIRM_BUTTON = "Confirm"
DECLINE_BUTTON = "Decline"
CONFIRM_DIALOG_TITLE = "Confirm this?"
CONFIRM_DIALOG_YES = "Yes, go ahead"
CONFIRM_DIALOG_NO = "Not yet"
CONFIRM_FALLBACK = "Please confirm: {summary}"
CONFIRMATION_OUTCOME = {
    "confirmed": "Confirmed",
    "consumed": "Confirmed",
    "declined": "Declined",
    "superseded": "Replaced",
    "expired": "Expired",
}
CONFIRMATION_NOTE = {
    "consumed": "Done.",
    "declined": "Nothing was done.",
    "superseded": "A newer request replaced this one; it can no longer be confirmed.",
    "expired": "Nothing was done.",
}
CONFIRMATION_AWAITING_APPROVAL = "A supervisor must approve this before it happens."
CONFIRMATION_BY = "{outcome} by {who} · {when}"
CONFIRMATION_WHEN = "{outcome} · {when}"
CONFIRMATION_DECIDED_FALLBACK = "{outcome}: {summary}"

# -- approval card (internal approvals channel, App Home) --------------------------------
APPROVAL_HEADER = "Approval needed"
APPROVAL_HEADER_SECOND = "Second approval needed"
APPROVAL_HEADER_DECIDED = {
    "approved": "Approved",
    "rejected": "Rejected",
    "expired": "Expired",
    "superseded": "Superseded",
}
APPROVE_BUTTON = "Approve"
REJECT_BUTTON = "Reject"
FIELD_REQUESTER = "Requested by"
FIELD_ACCOUNT = "Account"
FIELD_AMOUNT = "Amount"
FIELD_ROUTING = "Why it needs approval"
FIELD_EXPIRES = "Expires"
FIELD_POLICY = "Policy"
AMOUNT_AGAINST_CEILING = "{amount} (ceiling {ceiling})"
AMOUNT_WITH_AGGREGATE = "{amount} (ceiling {ceiling}; {aggregate} with earlier refunds)"
NO_ACCOUNT = "none"
PROGRESS = "Needs {required} approvals from different supervisors; {done} so far."
PROGRESS_WAITING = "{done} of {required} approvals — approved by {who}; waiting for a second supervisor"
EVIDENCE_HEADING = "Evidence cited"
EVIDENCE_NONE = "No evidence was cited."
EVIDENCE_MORE = "…and {count} more evidence item(s), in the API/CLI."
PROVENANCE_HEADING = "Where each value came from"
PROVENANCE = {
    "system_of_record": "from our records",
    "untrusted_text": "from text an outsider wrote — check it",
    "model": "chosen by the model",
    "search_knowledge": "evidence ids from the knowledge search",
}
PROVENANCE_UNKNOWN = "origin not recorded"
PROVENANCE_MORE = "…and {count} more argument(s), in the API/CLI."
RATIONALE_LABEL = "The agent's own explanation — written by the model, not verified"
APPROVAL_FALLBACK = "Approval needed: {summary}"
APPROVAL_DECIDED_FALLBACK = "{outcome}: {summary}"
DECIDED_BY = "{outcome} by {who} · {when}"
DECIDED_WHEN = "{outcome} · {when}"
DECISION_LINE = {"approve": "Approved by {who} · {when}", "reject": "Rejected by {who} · {when}"}
COMMENT = "Comment: {comment}"
EXPIRED_NOTE = "Nobody decided before it expired. Nothing was done."
SUPERSEDED_NOTE = "A newer version replaced this request; decide that one instead."
SUPERSEDED_BY = "A newer version replaced this request ({id}); decide that one instead."
UNKNOWN_PERSON = "someone"

# -- execution results on the approval card (the words for what was done come from the tool) --
RESULT_REPLAYED = "This was already done on {when}; nothing new happened."
RESULT_REPLAYED_NO_TIME = "This was already done earlier; nothing new happened."

# -- reject modal ------------------------------------------------------------------------
REJECT_MODAL_TITLE = "Reject request"
REJECT_MODAL_SUBMIT = "Reject"
REJECT_MODAL_CLOSE = "Cancel"
REJECT_MODAL_INTRO = "You are rejecting: {summary}"
REJECT_MODAL_LABEL = "Why? (the requester and the agent see this)"
REJECT_MODAL_PLACEHOLDER = "e.g. the damage photos do not match the order"

# -- App Home --------------------------------------------------------------------------
HOME_QUEUE_HEADER = "Approvals waiting"
HOME_QUEUE_EMPTY = "Nothing is waiting for approval."
HOME_QUEUE_MORE = "{count} more waiting — see `signoff approvals list` or `GET /api/approvals?status=pending`."
HOME_THREADS_HEADER = "Your assist threads"
HOME_THREADS_EMPTY = "You have no open assist threads. Mention me with `assist C-7` in a thread to start one."
HOME_THREAD_LINE = "{customer} — {channel}, thread {ts}"
HOME_THREADS_MORE = "…and {count} more."
HOME_EMPTY = "Nothing needs you right now."

# -- shadow (C16): the agent's proposal, recorded, not executed ------------------------------
SHADOW_HEADER = "Suggestion — {label}"
SHADOW_FALLBACK = "Suggestion ({label}): {summary}"
SHADOW_WOULD_NEED = "Outside shadow it needs"
SHADOW_ARGUMENTS = "Exact action"
SHADOW_NOTE = (
    "The agent proposed this; nothing was carried out and there is nothing to approve. "
    "If you agree, carry it out yourself; the rollout report compares it with what staff did."
)
SHADOW_THREAD_NOTE = "Nothing was carried out (shadow stage). If you agree, carry it out yourself."

# -- escalation ------------------------------------------------------------------------
ESCALATION_HEADER = "Handed to a person"
ESCALATION_REASON = "Reason (the agent's words): {reason}"
ESCALATION_SUMMARY = "Summary (the agent's words): {summary}"
ESCALATION_CUSTOMER = "Customer"
ESCALATION_CONVERSATION = "Conversation"
ESCALATION_PING = "{group} can someone pick this up?"
ESCALATION_TRACE_FOLLOWS = "The agent's trace — every tool call and gate decision — follows in this thread."
ESCALATION_FALLBACK = "Handed to a person: {reason}"
TRACE_HEADER = "Trace ({first}–{last} of {total})"
TRACE_EMPTY = "The agent made no tool calls."
TRACE_FALLBACK = "Trace of the agent's tool calls ({first}–{last} of {total})"
GATE = {
    "execute": "ran",
    "reject": "refused",
    "intercept": "repeat intercepted",
    "confirmation": "waiting for confirmation",
    "approval": "sent for approval",
    "record": "recorded, not run (shadow)",
}
GATE_UNDECIDED = "not decided"
TRACE_ERROR = " (error)"

# -- streaming and steps ---------------------------------------------------------------
STATUS_WORKING = "is working on it…"
LOADING_MESSAGES = ("Looking things up…", "Checking the details…", "Almost there…")
STEPS_HEADING = "Steps"
#: A gate decision as a step of the reply: (title template, step status).
GATE_STEP = {
    "execute": ("{summary}", "complete"),
    "confirmation": ("{summary} — waiting for your confirmation", "pending"),
    "approval": ("{summary} — waiting for a supervisor's approval", "pending"),
    "reject": ("{summary} — not allowed", "error"),
    "intercept": ("{summary} — already done a moment ago", "complete"),
    "record": ("{summary} — recorded, not carried out", "complete"),
}
ANSWER_FALLBACK = "Reply from signoff"
STEP_STATUS = {"pending": "…", "in_progress": "…", "complete": "✓", "error": "✗"}

# -- feedback ----------------------------------------------------------------------------
FEEDBACK_POSITIVE = "Helpful"
FEEDBACK_NEGATIVE = "Not helpful"
FEEDBACK_POSITIVE_LABEL = "This answer was helpful"
FEEDBACK_NEGATIVE_LABEL = "This answer was not helpful"
FEEDBACK_THANKS = "Thanks for the feedback."

# -- ephemeral refusals and notices (to the one person who clicked) -----------------------
ONLY_SUPERVISOR = "Only a supervisor can decide this."
OWN_REQUEST = "You requested this, so someone else must approve it."
APPROVAL_CHANGED = "This approval changed; here is the current version."
ALREADY_DECIDED = "Already decided by {who}."
ALREADY_DECIDED_NOBODY = "This was already decided."
APPROVAL_EXPIRED = "This approval has expired."
NOT_YOURS_TO_CONFIRM = "Only the person this is for can confirm it."
CONFIRMATION_GONE = "This request is no longer waiting for a confirmation."
BAD_BUTTON = "That button no longer works. Ask again and I will send a fresh one."
REJECT_NEEDS_COMMENT = "Please say why you are rejecting."

# -- linking a Slack user to a customer account ----------------------------------------
LINK_PROMPT = (
    "Before I can look anything up I need to know which account is yours. "
    "Write `link` and the email address on your account, e.g. `link you@example.com`."
)
LINK_CODE_SENT = (
    "If that address is on an account, I've emailed it a 6-character code. Write the code here to finish linking."
)
LINK_CODE_SUBJECT = "Your code to link Slack to your account"
LINK_DONE = "Thanks — you're linked to your account. How can I help?"
LINK_BAD_CODE = "That code doesn't match or has expired. Write `link` and your email to get a new one."
LINK_TOO_MANY = "Too many attempts. Please wait a while and try again."
LINK_CODE_LIMIT = "Too many codes have been asked for. Please wait an hour and try again."

# -- assist mode ---------------------------------------------------------------------------
ASSIST_BOUND = "This thread is now bound to account {customer}. Ask me anything about it."
ASSIST_UNKNOWN = "I couldn't find that account. Check the id and try `assist C-7` again."
ASSIST_STAFF_ONLY = "Only support staff can start an assist thread."

# -- errors --------------------------------------------------------------------------------
GENERIC_ERROR = "Sorry — something went wrong on our side and I couldn't finish that. A person has been told."
LIMIT_REACHED = (
    "Sorry — this account has reached today's limit for the assistant. A person can still help: ask for one here."
)
TRY_AGAIN = "Sorry — I couldn't do that just now. Please try again in a minute."

# -- hand-off to a person (bot/slack/handoff.py) ----------------------------------------------
TAKEOVER_BUTTON = "Take over"
HANDBACK_BUTTON = "Hand back"
CLOSE_BUTTON = "Close"
HANDOFF_HOW = (
    "*Take over* to talk to the customer yourself: while you own it, your replies in this thread go "
    "to the customer under your name, theirs come here, and the agent stays silent. A line starting "
    "with `note:` is a note for the agent, given to it when you *Hand back*."
)
HANDOFF_TAKEN = "{name} took this over. Their replies in this thread now go to the customer."
HANDOFF_RETURNED = "{name} handed this back to the agent."
HANDOFF_CLOSED = "{name} closed this conversation."
HANDOFF_CUSTOMER = "*Customer:* {text}"
HANDOFF_REPAGE = "{group} still waiting for a person — can someone take this over?"
HANDOFF_REPAGE_NO_GROUP = "Still waiting for a person — can someone take this over?"
HANDOFF_REFUSED = {
    "taken": "Someone else took this over first.",
    "ended": "This hand-off has already ended.",
    "not_yours": "Only the person who took this over (or a supervisor) can do that.",
    "moved": "This hand-off just changed; look at the thread and try again.",
    "unknown": "That button no longer matches a hand-off.",
    "yours": "You already own this conversation.",
    "not_owner": "Only the person who took this over can send a suggestion; take it over first.",
    "sent": "This suggestion was already sent.",
}
#: The agent's suggested reply in the hand-off's thread (rendered by bot/slack/handoff.py).
SUGGESTION_MARK = (
    ":bulb: *Suggestion from the agent* — not sent. *Send* sends it to the customer as your own reply; "
    "or write your own."
)
SUGGESTION_FALLBACK = "Suggestion from the agent (not sent): {text}"
SUGGESTION_SEND_BUTTON = "Send"
SUGGESTION_SENT = "{name} sent the agent's suggestion to the customer."
HANDOFF_STAFF_ONLY = "Only support staff can take over a conversation."
#: A person's reply as a Slack customer sees it.
HANDOFF_FROM_PERSON = "*{name}* (support team): {text}"
