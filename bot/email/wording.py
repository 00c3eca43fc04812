"""What the email face says when code, not the agent, answers (webhook refusals, reply hints)."""

from __future__ import annotations

EMAIL_NOT_CONFIGURED = "The email bridge has no shared secret configured (SIGNOFF_EMAIL_SECRET)."
EMAIL_BAD_SIGNATURE = "The webhook signature is missing, stale or wrong."
EMAIL_UNPARSEABLE = "The inbound email could not be read: {reason}."
EMAIL_AUTH_FAILED = "The sender's domain failed {check}; the message was not accepted."
EMAIL_UNKNOWN_SENDER = "The sender is not a customer on file; the message was not accepted."
CONFIRM_HINT = "To confirm, reply with the code {code}: {summary}"
CONFIRM_HINT_MANY = "To confirm one of these, reply with its code:"
EMAIL_SIGNATURE = "\n\n-- \nThis reply was written by our support assistant. Reply to this email to continue."
EMPTY_REPLY = "Thanks for your message — we're on it."
WRONG_EMAIL_CONTENT_TYPE = "Send the email as application/json, multipart/form-data or a URL-encoded form."
