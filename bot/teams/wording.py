"""Every word the Teams face shows a person, in one place."""

from __future__ import annotations

WELCOME = (
    "Hi, I'm signoff. I look up orders, start returns, cancel orders and issue refunds — "
    "and I ask before I do anything that changes an order or moves money."
)
WELCOME_STAFF_HINT = "Staff: write `assist C-7` to bind this thread to a customer account, or `queue` for approvals."

CONFIRM_TITLE = "Please confirm"
CONFIRM_HINT = "Nothing happens until you confirm."
CONFIRM = "Confirm"
DECLINE = "Decline"
CONFIRMED = "Confirmed"
DECLINED = "Declined"
CONFIRMED_BY = "Confirmed by {who} on {when}"
DECLINED_BY = "Declined by {who} on {when}"
SUPERSEDED_CONFIRMATION = "This request was replaced by a newer one; nothing was done from it."

APPROVAL_TITLE = "Approval needed"
APPROVED_TITLE = "Approved"
REJECTED_TITLE = "Rejected"
EXPIRED_TITLE = "Expired"
SUPERSEDED_TITLE = "Replaced"
PROGRESS = "{done} of {needed} approvals"
REQUESTED_BY = "Requested by"
ACCOUNT = "Account"
AMOUNT = "Amount"
AMOUNT_VS_CEILING = "{amount} — above the {ceiling} ceiling"
AMOUNT_WITH_AGGREGATE = "{amount} — {aggregate} with earlier money, above the {ceiling} ceiling"
ROUTED = "Why it needs approval"
NEEDS_ROLE = "Needs"
EXPIRES = "Expires"
POLICY = "Policy"
ARGUMENTS = "Exact action"
EVIDENCE = "Evidence"
NO_EVIDENCE = "No evidence was cited."
RATIONALE_LABEL = "Written by the model — untrusted text, not verified by anyone"
DECISION_APPROVE = "Approved by {who} on {when}"
DECISION_REJECT = "Rejected by {who} on {when}"
COMMENT = "Comment"
REJECT_INPUT_LABEL = "Reason (required to reject)"
REJECT_INPUT_ERROR = "Write why you reject this request."
APPROVE = "Approve"
REJECT = "Reject"
EXPIRED_ON = "Expired on {when}; nothing was done."
SUPERSEDED = "Replaced by a newer request; nothing was done from this one."
MORE = "…and {count} more"

SOURCE = {
    "system_of_record": "from our records",
    "untrusted_text": "from text outsiders wrote",
    "model": "from the model",
}

DONE = "Done: {label}"
REFERENCE = "Reference: {ref}"
AWAITING_APPROVAL = "A supervisor must approve this before it happens."
REPLAYED = "Already done on {when} (replayed) — nothing was done twice."
REPLAYED_UNDATED = "Already done earlier (replayed) — nothing was done twice."

SHADOW_TITLE = "Suggestion — {label}"
SHADOW_WOULD_NEED = "Outside shadow it needs"
SHADOW_NOTE = (
    "The agent proposed this; nothing was carried out and there is nothing to approve. "
    "If you agree, carry it out yourself; the rollout report compares it with what staff did."
)
ESCALATION_TITLE = "Needs a person"
ESCALATION_REASON = "Reason"
ESCALATION_CONVERSATION = "Conversation"
ESCALATION_CUSTOMER = "Customer"
ESCALATION_TRACE = "What the agent tried"
NO_TRACE = "No tool calls."

NOT_ALLOWED = "You can't decide this one."
STALE = "This card is out of date; it has been refreshed."

# -- conversation replies (bot/teams/face.py) ------------------------------------------
NOT_LINKED = (
    "I can't tell which customer account is yours from this Teams account, so I can't look anything up. "
    "Please contact support through the shop's website or email."
)
ASSIST_HINT = "Write `assist C-7` to bind this thread to a customer account; then I work on that account with you."
ASSIST_BOUND = "This thread now works on account {customer} ({name}). Ask away."
ASSIST_UNKNOWN = "There is no customer account {customer}."
ASSIST_EXTERNAL = (
    "I do not bind a customer account here: guests or people from another organisation can read this "
    "conversation. Use a chat or channel of your own organisation only."
)
QUEUE_EMPTY = "No approvals are waiting."
QUEUE_HEAD = "Approvals waiting ({count}):"
QUEUE_LINE = "- {id} (v{version}, needs {role}): {summary}"
QUEUE_SUPERVISORS_ONLY = "Only supervisors decide approvals."
EMPTY_MESSAGE = "I got an empty message. What can I help with?"

# -- clicks (bot/teams/clicks.py) ------------------------------------------------------
NOT_FOUND = "This card is no longer valid."
OWN_REQUEST = "You asked for this yourself; someone else has to decide it."
WRONG_ROLE = "Deciding this needs the {role} role."
ALREADY = "This was already decided; the card shows where it stands."
EXPIRED = "This request expired; nothing was done."
WORKING = "Working on it: this card is redrawn with the outcome in a moment."

# -- hand-off to a person (bot/teams/takeover.py) -----------------------------------------
TAKEOVER_BUTTON = "Take over"
HANDBACK_BUTTON = "Hand back"
CLOSE_BUTTON = "Close"
HANDOFF_HOW = (
    "Take over to talk to the customer yourself: while you own it, your replies to this card "
    "(mention signoff in them) go to the customer under your name, theirs come here, and the agent "
    "stays silent. A reply starting with note: is a note for the agent, given to it when you hand back."
)
HANDOFF_WORKING = "Working on it: the outcome is posted under the card in a moment."
HANDOFF_TAKEN = "{name} took this over. Their replies to this card now go to the customer."
HANDOFF_RETURNED = "{name} handed this back to the agent."
HANDOFF_CLOSED = "{name} closed this conversation."
HANDOFF_CUSTOMER = "Customer: {text}"
HANDOFF_REPAGE = "Still waiting for a person — can someone take this over?"
HANDOFF_ENDED = "This hand-off has already ended."
HANDOFF_NOT_YOURS = "Only the person who took this over (or a supervisor) can do that."
HANDOFF_YOURS = "You already own this conversation."
SUGGESTION_MARK = (
    "Suggestion from the agent — not sent. Send sends it to the customer as your own reply; or write your own."
)
SUGGESTION_SEND_BUTTON = "Send"
SUGGESTION_SENT = "{name} sent the agent's suggestion to the customer."
SUGGESTION_NOT_OWNER = "Only the person who took this over can send a suggestion; take it over first."
SUGGESTION_SENT_ALREADY = "This suggestion was already sent."
