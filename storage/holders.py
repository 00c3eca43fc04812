"""Which process holds a claim, and whether it still runs.

Ledger claims, money-lock leases and running turns name their holder
(``host:pid:nonce``). On one host (a SQLite deployment, or replicas that share a
machine) a holder whose process is gone is known dead at once, so its work is
taken over without waiting for a timeout; elsewhere callers fall back to age.
"""

from __future__ import annotations

import os
import socket
import uuid

_HOST = socket.gethostname()[:40]
_NONCE = uuid.uuid4().hex[:12]


def process_id() -> str:
    """This process as a holder: ``host:pid:nonce`` (the pid read now: forks differ)."""
    return f"{_HOST}:{os.getpid()}:{_NONCE}"


def is_dead(holder: str) -> bool:
    """True only when ``holder`` ran on this host and its pid no longer exists (a reused pid
    reads as alive: callers then wait for the claim's age instead)."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != _HOST or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
