"""What the HTTP API says to people when code, not the agent, answers.

Every error body is ``{"error": CODE, "message": TEXT}``; the codes are stable,
the texts are for humans and may be reworded.
"""

from __future__ import annotations

MALFORMED_JSON = "The request body is not valid JSON."
NOT_AN_OBJECT = "The request body must be a JSON object."
BODY_TOO_LARGE = "The request body is too large (at most {limit} bytes)."
WRONG_CONTENT_TYPE = "Send the body as application/json."
NO_TOKEN = "Send a bearer token: Authorization: Bearer <JWT>."
BAD_TOKEN = "The bearer token is not valid: {reason}."
AUTH_NOT_CONFIGURED = "The HTTP API has no authentication configured (SIGNOFF_JWT_SECRET or SIGNOFF_JWKS_URL)."
KEYS_UNAVAILABLE = "The signing keys could not be fetched; try again shortly."
UNKNOWN_CUSTOMER = "This token names a customer we do not know."
UNKNOWN_STAFF = "This token names a staff member we do not know, or with another role."
STAFF_ONLY = "Only support staff may do this."
SUPERVISOR_ONLY = "Only a supervisor may do this."
CUSTOMERS_ONLY = "Only the customer of this conversation may ask for a person here."
CUSTOMER_ID_STAFF_ONLY = "customerId is for staff; a customer's account comes from their token."
CUSTOMER_ID_REQUIRED = "Staff must name the customer (customerId) to start a conversation."
CUSTOMER_ID_MISMATCH = "This conversation is bound to another customer than customerId."
NO_SUCH_CUSTOMER = "No such customer."
NO_SUCH_CONVERSATION = "No such conversation."
NO_SUCH_CONFIRMATION = "No such confirmation."
NO_SUCH_APPROVAL = "No such approval."
NO_SUCH_ROUTE = "No such endpoint."
METHOD_NOT_ALLOWED = "This endpoint does not accept {method}."
BUSY = "This conversation is busy with another request; try again."
INBOX_FULL = "Too many messages are waiting to be answered; nothing was stored, retry after {seconds} s."
MODEL_UNAVAILABLE = "The assistant is unavailable right now; try again shortly."
INTERNAL = "Something went wrong on our side. It has been logged."
DATABASE_DOWN = "The database is not answering."
DATABASE_UNAVAILABLE = "Our database is briefly unavailable; send the same request again in a moment."
METRICS_OFF = "Metrics are not enabled on this server."
METRICS_TOKEN = "Metrics need Authorization: Bearer <SIGNOFF_METRICS_TOKEN>."
METRICS_LOOPBACK = (
    "Metrics on this port answer this machine only; give them a port of their own (SIGNOFF_METRICS_PORT) "
    "or a token (SIGNOFF_METRICS_TOKEN)."
)
