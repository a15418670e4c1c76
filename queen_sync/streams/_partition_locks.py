"""The partition locks of the stream runners: one per (query, partition) in the process.

A partition's cycle and its idle flush must never run at once (a flush emitting a window
while a cycle folds an event into it loses the event or emits the window twice). The broker's
lease keeps two cycles of one partition apart, but not an idle flush (it carries no lease),
so the lock is taken by every runner of the same query in this process: two
``Stream.run("q")`` in one process share the lock of each partition.

The locks live in a weak map: an entry is freed when no runner holds its lock any more. A
forked child starts with a new, empty map (the parent's locks may be held by parent threads
that do not exist in the child), through :func:`queen_sync._fork.after_fork_in_child` and,
for a fork that ran no hook (a libc fork), a process id check on every call.
Across processes nothing is shared (see docs/streams.md, *Exactly once*).
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Tuple

from .. import _fork

__all__ = ["PartitionLock", "partition_lock"]


class PartitionLock:
    """A plain lock (``acquire`` / ``release`` / ``with``) that a weak map can hold
    (``threading.Lock`` objects cannot be weakly referenced)."""

    __slots__ = ("_lock", "__weakref__")

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """As :meth:`threading.Lock.acquire`."""
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        """As :meth:`threading.Lock.release`."""
        self._lock.release()

    def locked(self) -> bool:
        """True while some thread holds it."""
        return self._lock.locked()

    def __enter__(self) -> "PartitionLock":
        self._lock.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()


_LOCKS: "weakref.WeakValueDictionary[Tuple[str, str], PartitionLock]" = weakref.WeakValueDictionary()
_GUARD = threading.Lock()
_PID = os.getpid()  # the process the map belongs to


def partition_lock(query: str, partition_id: str) -> PartitionLock:
    """The lock of ``partition_id`` for the stream query ``query`` in this process: the same
    object for every caller while one of them keeps it, a new one after that."""
    key = (query, partition_id)
    if os.getpid() != _PID:  # forked without the hooks
        _after_fork_in_child()
    with _GUARD:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = PartitionLock()
        return lock


def _after_fork_in_child() -> None:
    # a parent thread may have held the guard or a partition lock at the fork: start anew
    global _LOCKS, _GUARD, _PID
    _GUARD = threading.Lock()
    _LOCKS = weakref.WeakValueDictionary()
    _PID = os.getpid()


# every fork path, uWSGI's (which skips Python's at-fork hooks) included
_fork.after_fork_in_child(_after_fork_in_child)
