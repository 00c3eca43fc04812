"""Where storage's exceptions become agent errors: the runtime's verbs are wrapped here,
so a face handles :mod:`agent.errors` only and never imports ``storage`` to catch."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from agent.errors import Busy, Unavailable
from storage.faults import is_unavailable
from storage.locks import LockBusy
from storage.steps import ConcurrentTurn

P = ParamSpec("P")
R = TypeVar("R")


def translated(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """``fn`` with a busy lock or a turn that moved on underneath it raised as :class:`Busy`,
    and a database outage as :class:`Unavailable`."""

    @functools.wraps(fn)
    async def verb(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except (LockBusy, ConcurrentTurn) as exc:
            raise Busy(str(exc)) from exc
        except Exception as exc:
            if is_unavailable(exc):
                raise Unavailable() from exc
            raise

    return verb


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database is unavailable right now: an :class:`Unavailable`
    from a runtime verb, or storage's own outage error met by a face's direct write (an inbox
    accept). The one test every face's 503 mapping uses."""
    return isinstance(exc, Unavailable) or is_unavailable(exc)
