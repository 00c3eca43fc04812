"""Structured logs (C15): structlog, JSON lines on stderr, stdlib logging routed through it.

Call :func:`configure_logging` once at the CLI edge. Context bound with
``structlog.contextvars.bind_contextvars(trace_id=..., run_id=...,
conversation_id=...)`` is merged into every line, including lines written by
libraries through the standard ``logging`` module.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

#: Marks the handler this module installs, so a second call replaces it instead of stacking.
_HANDLER_NAME = "signoff.structlog"

#: HTTP client libraries that log every request at INFO ("HTTP Request: POST …"): one line per
#: model step is a formatted JSON write on the hot path and says nothing the runtime's own
#: events do not. Their warnings and errors still come through.
_CHATTY = ("httpx", "httpx2", "httpcore", "httpcore2")


def _processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ExtraAdder(),
    ]


def configure_logging(json: bool = True, level: str | int = "INFO", *, stream: TextIO | None = None) -> None:
    """Route structlog and stdlib ``logging`` to one handler on ``stream`` (stderr).

    ``json=True`` writes one JSON object per line (``event``, ``level``,
    ``logger``, ``timestamp`` plus bound context and extras); ``json=False``
    writes the human console format for development.
    """
    shared = _processors()
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            *shared[:-1],
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())
    for name in _CHATTY:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))


def get_logger(name: str | None = None) -> Any:
    """A structlog logger (bound context and stdlib routing included)."""
    return structlog.get_logger(name)


__all__ = ["configure_logging", "get_logger"]
