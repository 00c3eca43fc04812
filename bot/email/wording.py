"""What the email face says when code, not the agent, answers (webhook refusals, reply hints)."""

from __future__ import annotations

EMAIL_NOT_CONFIGURED = "The email bridge has no shared secret configured (SIGNOFF_EMAIL_SECRET)."
EMAIL_BAD_SIGNATURE = "The webhook signature is missing, stale or wrong."
EMAIL_UNPARSEABLE = "The inbound email could not be read: {reason}."
EMAIL_AUTH_FAILED = "The sender's domain failed {check}; the message was not accepted."
EMAIL_UNKNOWN_SENDER = "The sender is not a customer on file; the message was not accepted."
CONFIRM_HINT = "To confirm, reply with the code {code}: {summary}"
CONFIRM_HINT_MANY = "To confirm one of these, reply with its code:"
UNVERIFIED_SENDER = (
    "We could not confirm that this message really came from your address (your mail provider "
    "did not vouch for it), so this answer uses only our public help information and nothing "
    "from your account, and no changes were made. For help with your account or orders, write "
    "to us from your address through a provider that signs its mail (DKIM/DMARC), or sign in to "
    "your account on our website and use the chat there."
)
SIGNATURE = "\n\n-- \nThis reply was written by our support assistant. Reply to this email to continue."
EMPTY_REPLY = "Thanks for your message — we're on it."
WRONG_EMAIL_CONTENT_TYPE = "Send the email as application/json, multipart/form-data or a URL-encoded form."
UNVERIFIED_SUBJECT = "About your message to our support team"
LINK_REMOVED = "[link removed]"
ATTACHMENTS_NOT_READ = (
    "We could not read the attachment(s) you sent ({names}): our assistant reads the text of "
    "your email only. If they matter, please describe them in words or send them through your account."
)
TEXT_NOT_ALL_READ = (
    "Your email was very long, so our assistant read only its beginning (about 500,000 "
    "characters). If something further down matters, please send it again in a shorter message."
)
#: A person's reply while they own the conversation (a hand-off): signed with their name.
HANDOFF_SIGNATURE = "\n\n-- \n{name}, customer support. Reply to this email to continue."
