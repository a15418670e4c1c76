"""Fault injection and request accounting for the embedded broker."""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from typing import Deque, List, NamedTuple, Optional

__all__ = ["Fault", "FaultHit", "FaultInjector", "RequestLog", "ACTIONS", "HISTORY_SIZE"]

#: How many applied faults :attr:`FaultInjector.history` keeps (the oldest are dropped).
HISTORY_SIZE = 100_000

ACTIONS = ("drop_before", "drop_after", "status", "delay", "blackhole")


class Fault(object):
    """One registered fault. ``remaining`` is None for "every matching request"."""

    __slots__ = ("method", "path_prefix", "action", "remaining", "status", "retry_after", "delay_ms",
                 "body", "hits")

    def __init__(self, method: Optional[str], path_prefix: str, action: str, times: Optional[int],
                 status: int, retry_after: Optional[float], delay_ms: float, body: Optional[dict]) -> None:
        self.method = method.upper() if method else None
        self.path_prefix = path_prefix
        self.action = action
        self.remaining = times
        self.status = status
        self.retry_after = retry_after
        self.delay_ms = delay_ms
        self.body = body
        self.hits = 0

    def __repr__(self) -> str:
        return "Fault(%s %s%s -> %s, remaining=%s, hits=%d)" % (
            self.method or "*", self.path_prefix or "/", "*", self.action, self.remaining, self.hits)


class FaultHit(NamedTuple):
    """One request a fault was applied to (an entry of :attr:`FaultInjector.history`).

    ``at`` is ``time.monotonic()`` (seconds) when the fault matched; ``body`` the raw request
    body (``b""`` for none), so a test can tell which messages / leases an ack or push carried.
    """

    at: float
    method: str
    path: str
    action: str
    status: int
    delay_ms: float
    body: bytes


class FaultInjector(object):
    """Registry of faults applied to incoming requests, first match wins.

    Each matching request consumes one use of the fault (``times``); a fault with ``times=None``
    applies to every matching request until :meth:`clear` or :meth:`remove`.

    :attr:`history` records every request a fault was applied to, in order (a
    :class:`FaultHit` each, the last :data:`HISTORY_SIZE` kept; :meth:`clear` leaves it,
    ``history.clear()`` empties it): what the injection did, for tests that must explain an
    outcome (e.g. a redelivery) by a fault on a given request.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: List[Fault] = []
        self.history: Deque[FaultHit] = deque(maxlen=HISTORY_SIZE)

    def add(self, method: Optional[str] = None, path_prefix: str = "", action: str = "status", *,
            times: Optional[int] = 1, status: int = 503, retry_after: Optional[float] = None,
            delay_ms: float = 0, ms: Optional[float] = None, body: Optional[dict] = None) -> Fault:
        """Register a fault.

        Args:
            method: HTTP method to match (``"POST"``...), or None for any.
            path_prefix: request path prefix to match (without the query string), e.g.
                ``"/api/v1/push"``; ``""`` matches everything.
            action: ``"drop_before"`` (close the connection without processing),
                ``"drop_after"`` (process and commit, then close without answering: a lost
                response), ``"status"`` (answer ``status`` with a JSON ``{"error": ...}`` body
                without processing, with a ``Retry-After`` header when ``retry_after`` is set)
                ``"delay"`` (sleep ``delay_ms`` milliseconds, then process normally) or
                ``"blackhole"`` (read the request, never process nor answer it, keep the
                connection open until the client gives up or the broker stops: a half-open
                connection).
            times: how many matching requests the fault applies to (None = unlimited).
            status: HTTP status for ``"status"`` (e.g. 503, 429, 500).
            retry_after: seconds for the ``Retry-After`` header of ``"status"``.
            delay_ms / ms: milliseconds for ``"delay"`` (``ms`` is an alias).
            body: JSON body for ``"status"`` (default ``{"error": "injected fault"}``).

        Returns:
            The :class:`Fault` (its ``hits`` attribute counts the requests it affected).

        Raises:
            ValueError: unknown action.
        """
        if action not in ACTIONS:
            raise ValueError("unknown fault action %r (one of %s)" % (action, ", ".join(ACTIONS)))
        if ms is not None:
            delay_ms = ms
        f = Fault(method, path_prefix, action, times, status, retry_after, delay_ms, body)
        with self._lock:
            self._faults.append(f)
        return f

    def remove(self, fault: Fault) -> None:
        """Unregister one fault (no error if it is already gone)."""
        with self._lock:
            if fault in self._faults:
                self._faults.remove(fault)

    def clear(self) -> None:
        """Remove every fault."""
        with self._lock:
            self._faults.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._faults)

    def match(self, method: str, path: str, body: bytes = b"") -> Optional[Fault]:
        """Return (and consume one use of) the first fault matching the request, if any, and
        record it in :attr:`history` (with ``body``, the raw request body)."""
        if not self._faults:
            return None
        with self._lock:
            for f in self._faults:
                if (f.method is None or f.method == method) and path.startswith(f.path_prefix):
                    f.hits += 1
                    self.history.append(FaultHit(time.monotonic(), method, path, f.action, f.status,
                                                 f.delay_ms, bytes(body or b"")))
                    if f.remaining is not None:
                        f.remaining -= 1
                        if f.remaining <= 0:
                            self._faults.remove(f)
                    return f
        return None


class RequestLog(object):
    """Counts requests by (method, path) (path without the query string)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter = Counter()

    def record(self, method: str, path: str) -> None:
        with self._lock:
            self._counts[(method, path)] += 1

    def count(self, method: Optional[str] = None, path_prefix: str = "") -> int:
        with self._lock:
            return sum(n for (m, p), n in self._counts.items()
                       if (method is None or m == method.upper()) and p.startswith(path_prefix))

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()
