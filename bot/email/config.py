"""The email face's SMTP settings, as one small frozen dataclass (read from the environment by
``bot/settings.py``, given meaning by ``bot/email/settings.py``; no SMTP client here).

``SIGNOFF_SMTP_URL`` is ``smtp[s]://[user:pass@]host[:port][?starttls=1&from=addr]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass(frozen=True, kw_only=True)
class SmtpConfig:
    host: str
    port: int
    ssl: bool = False
    starttls: bool = False
    username: str | None = None
    password: str | None = None
    from_address: str | None = None
    timeout_s: float = 15.0

    @classmethod
    def from_url(cls, url: str) -> SmtpConfig:
        """Parse ``smtp[s]://[user:pass@]host[:port][?starttls=1&from=addr]``."""
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
            raise ValueError("SIGNOFF_SMTP_URL: must be smtp://host:port or smtps://host:port")
        q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        ssl = parts.scheme == "smtps"
        return cls(
            host=parts.hostname,
            port=parts.port or (465 if ssl else 25),
            ssl=ssl,
            starttls=q.get("starttls", "") in ("1", "true", "yes"),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            from_address=q.get("from") or None,
        )
