"""The :class:`Transport` object: its options and headers, the urllib3 ``PoolManager`` (one
connection pool per broker URL) and its reset in a forked child, the choice of broker per
call (round-robin, or the affinity hash ring, healthy URLs first), and
:meth:`Transport.request`, the retry loop (policy, push time budget, backoff,
``Retry-After``, failover) around :func:`send_once`.

The rules it keeps are listed in :mod:`queen_sync.transport`. Logging goes to the
``queen_sync.transport`` logger; request headers are never logged.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import hashlib
import ipaddress
import itertools
import logging
import os
import ssl
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import urlencode

import urllib3

from .. import _fork
from .._tls import tls_options
from .._validate import headers_arg, int_arg, redact_url
from ..backoff import Backoff, ExponentialBackoff
from ..errors import ClientClosedError, InvalidInputError
from ._attempt import Response, send_once
from ._polls import PollRegistry
from ._retry import (
    _POLICIES,
    DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS,
    RETRY_ALWAYS,
    RETRY_IF_UNSENT,
    RETRY_PUSH,
    _Attempt,
    _may_retry,
)

__all__ = ["Transport", "DEFAULT_POOL_MAXSIZE", "LOAD_BALANCING_STRATEGIES"]

log = logging.getLogger("queen_sync.transport")

#: Connections kept alive per broker host.
DEFAULT_POOL_MAXSIZE = 64

#: ``load_balancing_strategy`` values.
LOAD_BALANCING_STRATEGIES = ("round-robin", "affinity")

_USER_AGENT = "queen-sync/0.1.0"
#: Most read timeouts whose urllib3.Timeout is kept (:func:`_timeout`).
_MAX_TIMEOUTS = 32


_LIVE: "weakref.WeakSet[Transport]" = weakref.WeakSet()


@functools.lru_cache(maxsize=_MAX_TIMEOUTS)
def _timeout(connect_s: Optional[float], read_millis: int) -> urllib3.Timeout:
    """The Timeout of a call with read timeout ``read_millis`` (a few recur: a long poll's, an
    ack's). Made once and shared: urllib3 clones the one it is given per request."""
    return urllib3.Timeout(connect=connect_s, read=int(read_millis) / 1000.0)


def _reset_all_after_fork() -> None:
    for t in list(_LIVE):
        try:
            t._reset_after_fork()
        except Exception:  # pragma: no cover - must never break a fork
            pass


# os.register_at_fork, and uWSGI's post-fork hook (it forks without Python's at-fork hooks)
_fork.after_fork_in_child(_reset_all_after_fork)


def _hash64(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")


def _check_host(base: str) -> None:
    """Raise InvalidInputError when urllib3 cannot parse ``base`` (a host with a space or a
    bad percent escape passes ``urllib.parse`` but would fail every request with urllib3's
    own ``LocationParseError``, outside the error tree), or when its host name cannot be
    looked up at all (an empty or over-long label, ``host..``: the socket layer's IDNA
    encoding refuses it at every connect, after the whole retry budget)."""
    try:
        host = urllib3.util.parse_url(base).host or ""
    except urllib3.exceptions.LocationParseError as exc:
        raise InvalidInputError("invalid broker URL %r: %s" % (redact_url(base)[:300], str(exc)[:300])) from None
    if host.startswith("["):
        return  # an IPv6 literal: no name to encode
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    try:
        host.encode("idna")
    except UnicodeError as exc:
        raise InvalidInputError("invalid broker URL %r: host %r: %s" % (
            redact_url(base)[:300], host[:100], exc)) from None


class Transport:
    """Thread-safe HTTP client for one or more broker base URLs.

    Args:
        urls: validated base URLs (``http(s)://host:port[/prefix]`` without a trailing slash).
        timeout_millis: connect and read timeout of each attempt, in milliseconds.
        retry_attempts: total attempts per call (at least 1; with several URLs, every URL is
            tried at least once on connection errors).
        retry_delay_millis: first backoff delay in milliseconds; doubles per retry, with jitter
            (ignored when ``backoff`` is given).
        retry_max_delay_millis: cap of one backoff delay, in milliseconds (ignored by the
            backoff when ``backoff`` is given); also the most of a 429 / 503 ``Retry-After``
            that is honoured per attempt (always).
        bearer_token: sent as ``Authorization: Bearer <token>``; never logged nor shown.
        headers: extra request headers, applied after the defaults (they may override them).
        pool_maxsize: connections kept alive per broker host.
        connect_timeout_millis: connect timeout in milliseconds (default: ``min(timeout_millis, 10000)``).
        backoff: a :class:`Backoff` (default ``ExponentialBackoff(retry_delay_millis,
            retry_max_delay_millis)``).
        load_balancing_strategy: ``"round-robin"`` or ``"affinity"`` (see :mod:`queen_sync.transport`).
        affinity_hash_ring: virtual nodes per URL on the affinity ring.
        health_retry_after_millis: how long a failed URL is skipped, in milliseconds.
        ca_certs: path of a PEM CA bundle to verify ``https`` brokers with, instead of the
            system's trust store (a private CA).
        cert_file / key_file: path of a PEM client certificate (and its key, when not in
            the same file) presented to ``https`` brokers (mutual TLS).
        ssl_context: a ready :class:`ssl.SSLContext` used as is for ``https`` brokers
            (exclusive with the three options above: configure the context instead).
            Without any of these, urllib3's defaults apply: certificates are verified
            against the system's trust store, host names checked.
        push_retry_timeout_millis: time budget of retries of a push (:data:`RETRY_PUSH`), in
            milliseconds (default :data:`DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS`; see
            :mod:`queen_sync.transport`).

    Raises:
        InvalidInputError: a URL urllib3 cannot parse (a host with a space), a bad option
            value (an int option out of range, a non-str ``bearer_token``, non-mapping
            ``headers``), an unknown strategy, a bad ``backoff``,
            or TLS options that are not usable (a file that does not exist, ``key_file``
            without ``cert_file``, ``ssl_context`` mixed with files, no ``https`` URL).
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        timeout_millis: int = 30000,
        retry_attempts: int = 3,
        retry_delay_millis: int = 500,
        retry_max_delay_millis: int = 10000,
        bearer_token: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
        connect_timeout_millis: Optional[int] = None,
        backoff: Optional[Backoff] = None,
        load_balancing_strategy: str = "round-robin",
        affinity_hash_ring: int = 128,
        health_retry_after_millis: int = 5000,
        ca_certs: Optional[str] = None,
        cert_file: Optional[str] = None,
        key_file: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        push_retry_timeout_millis: int = DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS,
    ) -> None:
        if not urls:
            raise ValueError("at least one broker URL is needed")
        for base in urls:
            _check_host(base)
        self._tls = tls_options(urls, ca_certs, cert_file, key_file, ssl_context)
        int_arg("affinity_hash_ring", affinity_hash_ring, 1)
        int_arg("health_retry_after_millis", health_retry_after_millis, 0)
        int_arg("timeout_millis", timeout_millis, 1)
        int_arg("retry_attempts", retry_attempts, 1)
        int_arg("push_retry_timeout_millis", push_retry_timeout_millis, 0)
        int_arg("retry_delay_millis", retry_delay_millis, 0)
        int_arg("retry_max_delay_millis", retry_max_delay_millis, 0)
        int_arg("pool_maxsize", pool_maxsize, 1)
        if connect_timeout_millis is not None:
            int_arg("connect_timeout_millis", connect_timeout_millis, 1)
        if bearer_token is not None and not isinstance(bearer_token, str):
            raise InvalidInputError("bearer_token must be a str")
        extra_headers = headers_arg(headers)  # InvalidInputError now, not a ValueError at the first call
        if bearer_token is not None:
            headers_arg({"Authorization": "Bearer %s" % bearer_token})
        if load_balancing_strategy not in LOAD_BALANCING_STRATEGIES:
            raise InvalidInputError(
                "load_balancing_strategy must be one of %s, got %r"
                % (", ".join(LOAD_BALANCING_STRATEGIES), load_balancing_strategy)
            )
        if backoff is not None and not callable(getattr(backoff, "compute", None)):
            raise InvalidInputError("backoff must have a compute(failures) -> seconds method, got %r" % (backoff,))
        self._urls: Tuple[str, ...] = tuple(urls)
        self._timeout_millis = timeout_millis
        self._connect_timeout_s = (
            min(self._timeout_millis, 10000) if connect_timeout_millis is None else connect_timeout_millis
        ) / 1000.0
        # built once: urllib3 clones a Timeout per request, so one instance is shared safely
        self._default_timeout = urllib3.Timeout(connect=self._connect_timeout_s, read=timeout_millis / 1000.0)
        self._attempts = retry_attempts
        self._push_budget_s = push_retry_timeout_millis / 1000.0
        self._retry_after_cap_s = retry_max_delay_millis / 1000.0
        self._backoff: Backoff = backoff if backoff is not None else ExponentialBackoff(
            retry_delay_millis, retry_max_delay_millis
        )
        self._pool_maxsize = pool_maxsize
        base_headers: Dict[str, str] = {
            "Accept": "application/json",
            "User-Agent": _USER_AGENT,
        }
        if bearer_token:
            base_headers["Authorization"] = "Bearer %s" % bearer_token
        base_headers.update(extra_headers)
        self._headers = base_headers
        self._post_headers = dict(base_headers)
        self._post_headers.setdefault("Content-Type", "application/json")
        self._strategy = load_balancing_strategy
        self._health_retry_s = health_retry_after_millis / 1000.0
        n = len(self._urls)
        self._unhealthy_until: List[float] = [0.0] * n
        self._ring_hashes: List[int] = []
        self._ring_nodes: List[int] = []
        if load_balancing_strategy == "affinity" and n > 1:
            ring = sorted(
                (_hash64("%s#%d" % (u, v)), i) for i, u in enumerate(self._urls) for v in range(affinity_hash_ring)
            )
            self._ring_hashes = [h for h, _ in ring]
            self._ring_nodes = [i for _, i in ring]
        self._rr = itertools.count()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._stats: Dict[str, int] = {"retries": 0, "failovers": 0, "errors": 0}
        self._pid = os.getpid()
        self._polls = PollRegistry()  # long polls in flight: close() interrupts them (_polls)
        self._pool = self._new_pool()
        # base URL -> (its urllib3 HTTP(S)ConnectionPool, path prefix); skips PoolManager's
        # per-request URL parsing and pool-key lookup on the hot path
        self._host_pools: Dict[str, Tuple[Any, str]] = {}
        _LIVE.add(self)

    # ------------------------------------------------------------------ pool

    def _new_pool(self) -> urllib3.PoolManager:
        pm = urllib3.PoolManager(
            num_pools=max(10, 2 * len(self._urls)),
            maxsize=self._pool_maxsize,
            # more threads than connections wait for one (no "Connection pool is full" churn)
            block=True,
            retries=False,
            **self._tls,
        )
        pm.pool_classes_by_scheme = self._polls.pool_classes  # urllib3's own, reporting long polls
        return pm

    def _reset_after_fork(self) -> None:
        """In a forked child: new locks and a new pool (the parent's sockets and any lock held
        by a parent thread that does not exist here must not be used)."""
        self._lock = threading.Lock()
        closed = self._closed.is_set()
        self._closed = threading.Event()  # its Condition's lock may have been held at the fork
        if closed:
            self._closed.set()
        self._rr = itertools.count()
        self._polls = PollRegistry()  # the parent's long polls are its own: never shut down here
        self._pool = self._new_pool()
        self._host_pools = {}
        self._pid = os.getpid()
        self._unhealthy_until = [0.0] * len(self._urls)
        log.debug("new connection pool after fork (pid %d)", self._pid)

    def _get_pool(self) -> urllib3.PoolManager:
        if os.getpid() != self._pid:  # fork without the at-fork hook (e.g. os.register_at_fork missing)
            self._reset_after_fork()
        return self._pool

    def _host_pool(self, base: str) -> Tuple[Any, str]:
        """The connection pool of broker ``base`` and its path prefix (cached)."""
        if os.getpid() != self._pid:
            self._reset_after_fork()
        hp = self._host_pools.get(base)
        if hp is None:
            u = urllib3.util.parse_url(base)
            hp = (self._pool.connection_from_url(base), (u.path or "").rstrip("/"))
            self._host_pools[base] = hp
        return hp

    @property
    def urls(self) -> Tuple[str, ...]:
        """The broker base URLs, in configuration order."""
        return self._urls

    @property
    def timeout_millis(self) -> int:
        """Default per-attempt timeout, in milliseconds."""
        return self._timeout_millis

    @property
    def backoff(self) -> Backoff:
        """The retry delay policy."""
        return self._backoff

    @property
    def pool_maxsize(self) -> int:
        """Connections kept per broker host (the most requests in flight to one broker)."""
        return self._pool_maxsize

    @property
    def load_balancing_strategy(self) -> str:
        """``"round-robin"`` or ``"affinity"``."""
        return self._strategy

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def stats(self) -> Dict[str, Any]:
        """Counters and URL health.

        Returns:
            ``{"retries": int, "failovers": int, "errors": int (calls that failed for good),
            "urls": [{"url": str, "healthy": bool}, ...]}``.
        """
        now = time.monotonic()
        with self._lock:
            out: Dict[str, Any] = dict(self._stats)
        out["urls"] = [{"url": u, "healthy": self._unhealthy_until[i] <= now} for i, u in enumerate(self._urls)]
        return out

    def _count(self, key: str) -> None:
        with self._lock:
            self._stats[key] += 1

    def close(self) -> None:
        """Close every pooled connection and interrupt the long polls in flight (their pops
        raise ClientClosedError at once; see :mod:`._polls`); other calls in flight finish.
        Idempotent; later requests raise ClientClosedError."""
        if self._closed.is_set():
            return
        self._closed.set()
        if os.getpid() == self._pid:  # in a forked child the sockets are still the parent's
            self._polls.interrupt()
        with self._lock:
            try:
                self._pool.clear()
            except Exception:  # pragma: no cover - best effort
                log.debug("error while clearing the connection pool", exc_info=True)

    # ------------------------------------------------------------------ URL choice

    def _ring_order(self, key: str) -> List[int]:
        """Distinct URL indexes in ring order, starting at ``key``'s position."""
        hashes, nodes = self._ring_hashes, self._ring_nodes
        n = len(self._urls)
        size = len(hashes)
        pos = bisect.bisect_left(hashes, _hash64(key))
        out: List[int] = []
        for k in range(size):
            j = nodes[(pos + k) % size]
            if j not in out:
                out.append(j)
                if len(out) == n:
                    break
        return out

    def _candidates(self, key: Optional[str]) -> List[int]:
        """URL indexes in the order this call should try them: healthy ones first."""
        n = len(self._urls)
        if self._ring_hashes and key is not None:
            order = self._ring_order(key)
        else:
            start = next(self._rr) % n
            order = [(start + k) % n for k in range(n)]
        now = time.monotonic()
        unhealthy = self._unhealthy_until
        healthy = [i for i in order if unhealthy[i] <= now]
        if len(healthy) == n:
            return order
        return healthy + [i for i in order if unhealthy[i] > now]

    def _mark_unhealthy(self, idx: int, why: Exception) -> None:
        if len(self._urls) > 1 and self._health_retry_s > 0:
            if self._unhealthy_until[idx] <= time.monotonic():
                log.warning("broker %s marked unhealthy for %.0f ms: %s", self._urls[idx], self._health_retry_s * 1000, why)
            self._unhealthy_until[idx] = time.monotonic() + self._health_retry_s

    def _pause(self, seconds: float) -> bool:
        """Sleep ``seconds`` (interruptible by :meth:`close`); True when the transport was closed."""
        return self._closed.wait(seconds) if seconds > 0 else self._closed.is_set()

    # ------------------------------------------------------------------ request

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Optional[bytes] = None,
        query: Optional[Mapping[str, Any]] = None,
        idempotent: bool = False,
        timeout_millis: Optional[int] = None,
        retry: Optional[str] = None,
        affinity_key: Optional[str] = None,
        accept: Optional[Callable[[bytes], Any]] = None,
        long_poll: bool = False,
        on_retry: Optional[Callable[[Exception, int], Any]] = None,
    ) -> Response:
        """Send one call, with retries and failover, and return the 2xx reply.

        Args:
            method: ``GET``, ``POST`` or ``DELETE``.
            path: the route, starting with ``/`` (already validated / URL-safe).
            body: the JSON body bytes; a POST without one sends ``{}``. The same bytes are
                resent on every retry.
            query: query parameters (values already strings), or ``None``.
            idempotent: shorthand for ``retry=RETRY_ALWAYS`` (True) or ``RETRY_IF_UNSENT`` (False).
            timeout_millis: read timeout of this call in milliseconds (default: the client's).
            retry: the retry policy, :data:`RETRY_ALWAYS`, :data:`RETRY_IF_ANSWERED` or
                :data:`RETRY_IF_UNSENT` (see :mod:`queen_sync.transport`); overrides ``idempotent``.
            affinity_key: with ``"affinity"`` load balancing, the key hashed to pick the
                broker (``queue/partition[/group]``); ``None`` means round-robin.
            accept: checks a 2xx body and returns what becomes ``Response.value`` (e.g. the
                decoded results); a :class:`ProtocolError` or :class:`QueenConnectionError`
                it raises makes that reply a lost one (retried as such under
                :data:`RETRY_PUSH` / :data:`RETRY_ALWAYS`, else raised).
            long_poll: the call may wait at the broker (a pop with ``wait=true``):
                :meth:`close` interrupts it, and it raises ClientClosedError.
            on_retry: called in the calling thread as ``on_retry(error, attempt)`` when an
                attempt failed and another one follows (before the backoff pause):
                ``error`` is the :class:`~queen_sync.errors.QueenError` that attempt would
                have raised, ``attempt`` its number (1 for the first). A caller that retries
                for a long time itself (the push buffer) learns from it why a call is still
                running; what it returns is ignored and an exception from it is logged at
                DEBUG and ignored (the call goes on).

        Returns:
            the :class:`Response` (any 2xx status).

        Raises:
            ClientClosedError: the transport was closed (before the call, or during a
                ``long_poll``).
            QueenConnectionError: the broker could not be reached or the connection broke.
            QueenTimeoutError: a connect or read timeout.
            AuthenticationError: 401 / 403. RouteNotFoundError: 404.
            QueenHTTPError: any other non-2xx reply (``.retry_after`` holds a 429 / 503
            ``Retry-After`` in seconds as sent, uncapped, or None).
        """
        if self._closed.is_set():
            raise ClientClosedError("the Queen client is closed")
        policy = retry if retry is not None else (RETRY_ALWAYS if idempotent else RETRY_IF_UNSENT)
        if policy not in _POLICIES:
            raise InvalidInputError("unknown retry policy %r" % (policy,))
        method = method.upper()
        if method == "POST" and not body:
            body = b"{}"
        headers = self._post_headers if body is not None else self._headers
        if timeout_millis is None:
            timeout = self._default_timeout
        else:
            timeout = _timeout(self._connect_timeout_s, timeout_millis)
        target = path + ("?" + urlencode(query) if query else "")

        n = len(self._urls)
        max_attempts = max(self._attempts, n)
        # push: new attempts are started until the time budget is spent (queen_sync.transport docstring)
        budget_end = time.monotonic() + self._push_budget_s if policy == RETRY_PUSH else None
        order = self._candidates(affinity_key) if n > 1 else [0]
        pos = 0
        rounds = 0
        attempt = 0
        while True:
            idx = order[pos]
            base = self._urls[idx]
            attempt += 1
            try:
                pool, prefix = self._host_pool(base)
                with self._polls.long_poll() if long_poll else contextlib.nullcontext():
                    resp = send_once(
                        pool, prefix, self._pool_maxsize, base, method, path, target, body, headers, timeout, accept
                    )
            except _Attempt as failed:
                if failed.failover and n > 1:
                    self._mark_unhealthy(idx, failed.error)
                spent = attempt >= max_attempts and (budget_end is None or time.monotonic() >= budget_end)
                if not _may_retry(policy, failed) or spent or self._closed.is_set():
                    self._count("errors")
                    if self._closed.is_set() and long_poll:
                        # close() shut its socket down: the broker dropped the parked pop
                        raise ClientClosedError("the Queen client was closed while this pop waited at the broker") from None
                    if self._closed.is_set() and not failed.sent:
                        raise ClientClosedError("the Queen client is closed") from None
                    raise failed.error from None
                if failed.failover and pos + 1 < len(order):
                    pos += 1  # next broker at once
                    delay = 0.0
                    self._count("failovers")
                else:
                    delay = self._backoff.compute(rounds)
                    rounds += 1
                    if n > 1:
                        order = self._candidates(affinity_key)
                        pos = 0
                if failed.retry_after is not None:
                    delay = max(delay, min(failed.retry_after, self._retry_after_cap_s))
                if budget_end is not None and attempt >= max_attempts:
                    # past the attempt count, only the budget is left: the last attempt starts at its end
                    delay = min(delay, max(0.0, budget_end - time.monotonic()))
                if on_retry is not None:  # before the count: a caller seeing it has been told
                    try:
                        on_retry(failed.error, attempt)
                    except Exception:
                        log.debug("on_retry callback of %s %s raised", method, path, exc_info=True)
                self._count("retries")
                nxt = self._urls[order[pos]]
                # DEBUG, not WARNING: an outage would log every attempt; callers that retry
                # forever (the consumer) log once per outage themselves.
                log.debug(
                    "%s %s to %s failed (%s); attempt %d (of %s), retrying%s in %.0f ms",
                    method,
                    path,
                    base,
                    failed.error,
                    attempt,
                    max_attempts if budget_end is None else "%.0f ms budget" % (self._push_budget_s * 1000.0),
                    (" on " + nxt) if nxt != base else "",
                    delay * 1000.0,
                )
                if self._pause(delay):
                    raise ClientClosedError("the Queen client was closed while retrying") from None
                continue
            if n > 1 and self._unhealthy_until[idx]:
                self._unhealthy_until[idx] = 0.0
            return resp
