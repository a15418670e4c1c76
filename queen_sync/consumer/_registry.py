"""The consumers running in this process, for :meth:`Queen.close` (and fork safety).

Every started consumer is registered until its last thread ends. :meth:`Queen.close` stops
the client's consumers gracefully before it closes the transport, with its close timeout as
drain timeout (:func:`stop_consumers_for_close`), and shares its one close deadline with them:
their drain ends a little before it (:data:`CLOSE_RELEASE_RESERVE_S`, to leave time for the
releases), and a handler still running at the deadline is abandoned: its ack fails once the
transport is closed and the broker redelivers its message (and the ones queued behind it)
when the lease expires. A thread of a consumer (a handler calling ``close()``) never waits
for that consumer (:func:`in_consumer_thread`).

Fork: a process forked from one running a consumer gets a copy without threads; it is not
listed here (:func:`_consumers_of` skips it). In the child, before first use, the registry's
lock is made anew (a parent thread may have held it at fork time) and one WARNING names the
consumers inherited that way ("started before fork; start it in the worker": a consumer
started at import under ``gunicorn --preload`` does not run in the workers). Both happen in
Python's at-fork hook and, for fork paths that skip it (uWSGI forks without it), at the
first entry in the child (:func:`check_fork`, a pid check).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Set

from .. import _fork
from ._log import log

if TYPE_CHECKING:  # pragma: no cover
    from .._session import Session

__all__ = [
    "CLOSE_RELEASE_RESERVE_S",
    "check_fork",
    "in_consumer_thread",
    "register",
    "stop_consumers_for_close",
    "unregister",
]

#: Part of Queen.close()'s timeout kept for the final releases after the consumers' drain
#: deadline, in seconds (at most a quarter of the timeout).
CLOSE_RELEASE_RESERVE_S = 1.0

class RegisteredConsumer(Protocol):
    """What the registry reads of a :class:`~queen_sync.consumer.Consumer` (which registers
    itself: the registry does not import it), and :meth:`describe`, which
    :func:`queen_sync.running.running_consumers` reads of the consumers listed here."""

    _session: Any  #: the client's session (which client's consumer this is)
    _queue: str  #: named in the registry's warnings
    _started: bool
    _done: threading.Event  #: set once every thread of the consumer ended
    _pid: int  #: the process whose threads run it
    _thread_ids: Set[int]

    def _forked(self) -> bool: ...

    def describe(self) -> Dict[str, Any]: ...  # for Queen.running_consumers (queen_sync.running)

    def _request_stop(self, reason: str, drain_timeout: Optional[float] = None) -> None: ...


# Consumers started in this process, for Queen.close() (see stop_consumers_for_close).
_registry: "weakref.WeakSet[RegisteredConsumer]" = weakref.WeakSet()
_registry_lock = threading.Lock()
_registry_pid = os.getpid()  # the process the lock and the listed consumers belong to


def check_fork() -> None:
    """In a process forked since the last call (any fork path): make the registry's lock anew
    (a parent thread may have held it at fork time; the old one is never touched) and log one
    WARNING naming the running consumers inherited from the parent (they do not run here).
    A no-op in the process that started them."""
    global _registry_lock, _registry_pid
    pid = os.getpid()
    if pid == _registry_pid:
        return
    _registry_lock = threading.Lock()
    _registry_pid = pid
    inherited = [c for c in list(_registry) if c._started and not c._done.is_set() and c._pid != pid]
    if inherited:
        log.warning(
            "%d consumer(s) (queue(s) %s) started before fork; they do not run in this process (pid %d): "
            "start it in the worker, after the fork (e.g. gunicorn post_fork or without --preload, "
            "uWSGI --lazy-apps or @postfork)",
            len(inherited),
            ", ".join(sorted({repr(c._queue) for c in inherited})),
            pid,
        )


# every fork path, uWSGI's (which skips Python's at-fork hooks) included; and check_fork()
# runs on every registry entry as well
_fork.after_fork_in_child(check_fork)


def register(consumer: "RegisteredConsumer") -> None:
    """List a consumer that starts its threads."""
    check_fork()
    with _registry_lock:
        _registry.add(consumer)


def unregister(consumer: "RegisteredConsumer") -> None:
    """Forget a consumer whose last thread ended."""
    check_fork()
    with _registry_lock:
        _registry.discard(consumer)


def _consumers_of(session: "Session") -> List["RegisteredConsumer"]:
    """The consumers of a client (its ``session``) running in this process (started, not
    ended, not a forked child's copy)."""
    check_fork()
    with _registry_lock:
        found = [c for c in _registry if c._session is session]
    return [c for c in found if c._started and not c._done.is_set() and not c._forked()]


def in_consumer_thread(session: "Session") -> bool:
    """True when the calling thread is a thread of a consumer of the client of ``session``
    (a handler or callback runs in one): such a thread must not wait for that consumer to end."""
    me = threading.get_ident()
    return any(me in c._thread_ids for c in _consumers_of(session))


def stop_consumers_for_close(
    session: "Session", timeout_millis: int, deadline: Optional[float] = None
) -> Callable[[], None]:
    """Used by :meth:`Queen.close`: ask every consumer of the client (its ``session``)
    running in this process to stop gracefully now (reason ``"closed"``: no new pop, popped messages are handled and
    acked, the ones not given to a handler by the drain deadline are released).

    The drain deadline is the close deadline minus a reserve for those final releases
    (:data:`CLOSE_RELEASE_RESERVE_S`, at most a quarter of the timeout), so they are sent
    while the transport is still open.

    Args:
        session: the :class:`~queen_sync._session.Session` of the client being closed.
        timeout_millis: the close timeout, in milliseconds.
        deadline: the close deadline (a ``time.monotonic()`` value); default: now +
            ``timeout_millis``.

    Returns:
        a function that waits until those consumers ended or the deadline passed, whichever
        comes first (a handler still running then is abandoned: its ack fails once the
        transport is closed, and the broker redelivers its message when the lease expires);
        it never waits for the consumer whose thread calls it (a handler calling close()).
        Sends nothing itself.
    """
    timeout_s = timeout_millis / 1000.0
    if deadline is None:
        deadline = time.monotonic() + timeout_s
    left = max(0.0, deadline - time.monotonic())
    drain_s = max(0.0, left - min(CLOSE_RELEASE_RESERVE_S, left / 4.0))
    consumers = _consumers_of(session)
    for c in consumers:
        c._request_stop("closed", drain_s)

    def wait() -> None:
        me = threading.get_ident()
        for c in consumers:
            if me in c._thread_ids:
                continue
            if not c._done.wait(max(0.0, deadline - time.monotonic())):
                log.warning(
                    "closing the client: the consumer of queue %r still has a handler running at the close "
                    "deadline (%d ms); it is abandoned: its ack will fail and the broker redelivers its "
                    "message(s) once their lease expires",
                    c._queue,
                    timeout_millis,
                )

    return wait

