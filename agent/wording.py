"""What the agent says when code, not the model, has to speak. One place per surface."""

GIVE_UP_REPLY = (
    "I'm sorry — I couldn't finish this myself. I've passed your conversation, with everything "
    "I tried, to a colleague who will follow up with you here."
)
REFUSAL_REPLY = "I'm not able to help with that here. I've asked a colleague to take a look."
CONFIRMED_EVENT = "The {who} confirmed: {summary}. Outcome: {outcome}"
DECLINED_EVENT = "The {who} declined: {summary}. Nothing was done."
APPROVED_EVENT = "Approval {id} was approved by a supervisor. Outcome: {outcome}"
REJECTED_EVENT = "Approval {id} was rejected by a supervisor. Comment: {comment}. Nothing was done."
EXPIRED_EVENT = "Approval {id} expired before a supervisor decided. Nothing was done."
SUPERSEDED_EVENT = "Approval {id} was replaced by a supervisor's edited version ({summary}). Outcome: {outcome}"
