"""The one HTTP transport of queen_sync: a urllib3 ``PoolManager`` shared by every thread.

Connections
    One pool per broker URL, ``maxsize`` connections kept alive per host (64 by default, so
    many threads can talk to the broker at once without opening a socket per request).
    After a 204 the connection is dropped, never reused (a 0.15 broker sends a body with its
    204, which would desynchronise a keep-alive connection). Every POST carries a body
    (``{}`` at least): the broker answers an empty one with 400. Any 2xx reply is success at
    this level; callers decide from the body (a Queen 0.15 broker answers most refusals with
    200). Non-2xx replies raise :class:`QueenHTTPError` and its subclasses.

Retries (urllib3's own retries are off; :meth:`Transport.request` runs its own loop)
    Delays come from a pluggable :class:`Backoff` (redis-py style: ``compute(failures)``
    returns seconds); the default is :class:`ExponentialBackoff`, capped and with "equal
    jitter". A ``Retry-After`` header on a 429 / 503 is honoured (delta-seconds or an HTTP
    date) up to ``retry_max_delay_millis`` per attempt (default 10000 ms, also when a custom
    ``backoff`` is given): a broker asking for 100 s does not block a caller for 100 s.
    Whether a failed attempt is retried depends on what may have happened at the broker:

    ==========================  =========  ==============  ===============  ================
    failure                     push, GET  pop (``GET      ack, ack/batch,  4xx (not 429)
                                reads,     /pop``)         transaction,
                                configure,                 seek to end
                                delete,
                                lease extend
    ==========================  =========  ==============  ===============  ================
    not sent (refused, DNS,     retried    retried         retried          --
    connect timeout)
    429 / 503 reply (refused,   retried    retried         retried          --
    nothing processed)
    500 / 502 reply             retried    retried         **no**           --
    504 reply                   retried    **no**          **no**           --
    lost reply (connection      retried    **no**          **no**           --
    broke after sending, read
    timeout)
    other 4xx reply             never      never           never            never
    ==========================  =========  ==============  ===============  ================

    Why: a push body is built once with client-minted ``transactionId`` s, so a resent push
    is answered ``duplicate`` for what was already stored (one delivery). A configure is an
    upsert, a delete is idempotent and a lease extend sets ``max(expiry, now + s)``. A Queen
    broker answers its asynchronous routes with 200 only, so a 5xx it sends itself comes
    from before the work was submitted; 504 (and 502 from a proxy) may hide work that was
    done. A pop whose reply was lost has taken a lease: the messages come back only after
    the lease expires, so the pop is not resent blindly (the caller's next pop is the
    retry). An ack / transaction whose reply was lost may or may not have been applied: it
    is reported to the caller (:class:`QueenConnectionError`), never resent.

Push retry budget (:data:`RETRY_PUSH`)
    A push is retried on everything in the first column above, and also when its 2xx reply
    is empty (a broker killed while answering) or garbled (not one result per item): those
    count as lost replies, not as :class:`ProtocolError`. It is retried for a **time budget**,
    ``push_retry_timeout_millis`` (default 15000 ms), not ``retry_attempts`` times: new
    attempts are started, with the usual backoff, until the budget is spent (at least
    ``retry_attempts`` attempts are made either way); an attempt in flight when the budget
    ends still runs to its own ``timeout_millis``. Why 15 s: a broker restart (process
    restart, rolling deploy, failover to a standby) takes a few seconds, and three attempts
    with 0.5 s / 1 s backoff (1.5 s) do not span it, while 15 s does (attempts at about 0,
    0.5, 1.5, 3.5, 7.5 and 15 s with the default backoff); and 15 s still leaves room in
    the 30 s to 60 s a proxy or web front end usually gives a request, so a web handler
    that pushes fails with a clear error rather than being cut off by its gateway.
    ``push_retry_timeout_millis=0`` gives the plain ``retry_attempts`` count.

Several brokers
    ``load_balancing_strategy="round-robin"`` (default) spreads calls over the URLs;
    ``"affinity"`` hashes the call's affinity key (``queue/partition[/consumer group]``)
    on a consistent-hash ring (``affinity_hash_ring`` virtual nodes per URL), so one
    partition's traffic sticks to one broker. A URL that fails (connection error, timeout,
    5xx) is marked unhealthy and skipped for ``health_retry_after_millis``; when every URL
    is unhealthy they are all tried anyway. Within one call, a connection error fails over
    to the next URL at once; backoff starts when every URL has been tried.

Fork safety
    A child process gets a fresh pool and fresh locks: every live transport is reset in the
    child by ``os.register_at_fork`` and, under uWSGI (which forks without Python's at-fork
    hooks), by its post-fork hook (see :mod:`queen_sync._fork`); ``os.getpid()`` is checked
    on each request as a fallback. The parent keeps its connections.

Logging goes to the ``queen_sync.transport`` logger; request headers (and so the
``Authorization`` header) are never logged.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import logging
import os
import ssl
import threading
import time
import weakref
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type
from urllib.parse import urlencode

import urllib3
from urllib3.exceptions import (
    ClosedPoolError,
    SSLError as _U3SSLError,
    ConnectTimeoutError,
    EmptyPoolError,
    HTTPError as _U3HTTPError,
    NewConnectionError,
    ReadTimeoutError,
)

from . import _fork, codec
from ._tls import cert_rejected, plain_http_answered, tls_options
from .backoff import Backoff, ConstantBackoff, ExponentialBackoff, NoBackoff
from ._validate import headers_arg, int_arg
from .errors import (
    AuthenticationError,
    ClientClosedError,
    InvalidInputError,
    ProtocolError,
    QueenConnectionError,
    QueenHTTPError,
    QueenTimeoutError,
    RouteNotFoundError,
)

__all__ = [
    "Transport",
    "Response",
    "DEFAULT_POOL_MAXSIZE",
    "Backoff",
    "ExponentialBackoff",
    "ConstantBackoff",
    "NoBackoff",
    "RETRY_ALWAYS",
    "RETRY_IF_ANSWERED",
    "RETRY_IF_UNSENT",
    "RETRY_PUSH",
    "DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS",
    "LOAD_BALANCING_STRATEGIES",
]

log = logging.getLogger("queen_sync.transport")

#: Connections kept alive per broker host.
DEFAULT_POOL_MAXSIZE = 64

#: Retry policy of idempotent calls (push, GET reads, configure, delete, lease extend).
RETRY_ALWAYS = "always"
#: Retry policy of pop: retried before sending and after a refusal reply (5xx but 504, 429),
#: never after a lost reply.
RETRY_IF_ANSWERED = "answered"
#: Retry policy of ack / transaction / seek to end: retried only before sending or after 429 / 503.
RETRY_IF_UNSENT = "unsent"
#: Retry policy of push: as :data:`RETRY_ALWAYS`, plus a reply the ``accept`` check refuses
#: (an empty or garbled 200 body), and retried for ``push_retry_timeout_millis`` rather than
#: ``retry_attempts`` times (see the module docstring).
RETRY_PUSH = "push"
_POLICIES = (RETRY_ALWAYS, RETRY_IF_ANSWERED, RETRY_IF_UNSENT, RETRY_PUSH)

#: Default push retry budget, in milliseconds (see the module docstring, "Push retry budget").
DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS = 15000

#: ``load_balancing_strategy`` values.
LOAD_BALANCING_STRATEGIES = ("round-robin", "affinity")

_USER_AGENT = "queen-sync/0.1.0"
_MAX_ERROR_TEXT = 300
_REFUSED_STATUSES = (429, 503)


_LIVE: "weakref.WeakSet[Transport]" = weakref.WeakSet()


def _reset_all_after_fork() -> None:
    for t in list(_LIVE):
        try:
            t._reset_after_fork()
        except Exception:  # pragma: no cover - must never break a fork
            pass


# os.register_at_fork, and uWSGI's post-fork hook (it forks without Python's at-fork hooks)
_fork.after_fork_in_child(_reset_all_after_fork)


@dataclass(frozen=True)
class Response:
    """A broker reply with a 2xx status.

    Attributes:
        status: the HTTP status (200, 201, 204, ...).
        data: the raw body bytes (``b""`` after a 204: its body is discarded with the connection).
        url: the broker base URL that answered.
        value: what the call's ``accept`` check returned (e.g. the decoded body), or None.
    """

    status: int
    data: bytes
    url: str
    value: Any = None


class _Attempt(Exception):
    """Internal: one failed attempt, with what the retry loop needs to know."""

    def __init__(
        self,
        error: Exception,
        *,
        sent: bool,
        failover: bool,
        status: Optional[int] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.sent = sent
        self.failover = failover
        self.status = status
        if isinstance(error, QueenConnectionError):
            error.sent = sent
        self.retry_after = retry_after


def _may_retry(policy: str, failed: _Attempt) -> bool:
    if not failed.sent:
        return True
    st = failed.status
    if st is not None:
        if st in _REFUSED_STATUSES:
            return True
        if policy in (RETRY_ALWAYS, RETRY_PUSH):
            return st >= 500
        if policy == RETRY_IF_ANSWERED:
            return st >= 500 and st != 504
        return False
    return policy in (RETRY_ALWAYS, RETRY_PUSH)


def _hash64(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")


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
        load_balancing_strategy: ``"round-robin"`` or ``"affinity"`` (see the module docstring).
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
            milliseconds (default :data:`DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS`; see the module
            docstring).

    Raises:
        InvalidInputError: a bad option value (an int option out of range, a non-str
            ``bearer_token``, non-mapping ``headers``), an unknown strategy, a bad ``backoff``,
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
        self._pool = self._new_pool()
        # base URL -> (its urllib3 HTTP(S)ConnectionPool, path prefix); skips PoolManager's
        # per-request URL parsing and pool-key lookup on the hot path
        self._host_pools: Dict[str, Tuple[Any, str]] = {}
        _LIVE.add(self)

    # ------------------------------------------------------------------ pool

    def _new_pool(self) -> urllib3.PoolManager:
        return urllib3.PoolManager(
            num_pools=max(10, 2 * len(self._urls)),
            maxsize=self._pool_maxsize,
            # more threads than connections wait for one (no "Connection pool is full" churn)
            block=True,
            retries=False,
            **self._tls,
        )

    def _reset_after_fork(self) -> None:
        """In a forked child: new locks and a new pool (the parent's sockets and any lock held
        by a parent thread that does not exist here must not be used)."""
        self._lock = threading.Lock()
        closed = self._closed.is_set()
        self._closed = threading.Event()  # its Condition's lock may have been held at the fork
        if closed:
            self._closed.set()
        self._rr = itertools.count()
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
        """Close every pooled connection. Idempotent; later requests raise ClientClosedError."""
        if self._closed.is_set():
            return
        self._closed.set()
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
                :data:`RETRY_IF_UNSENT` (see the module docstring); overrides ``idempotent``.
            affinity_key: with ``"affinity"`` load balancing, the key hashed to pick the
                broker (``queue/partition[/group]``); ``None`` means round-robin.
            accept: checks a 2xx body and returns what becomes ``Response.value`` (e.g. the
                decoded results); a :class:`ProtocolError` or :class:`QueenConnectionError`
                it raises makes that reply a lost one (retried as such under
                :data:`RETRY_PUSH` / :data:`RETRY_ALWAYS`, else raised).

        Returns:
            the :class:`Response` (any 2xx status).

        Raises:
            ClientClosedError: the transport was closed.
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
            timeout = urllib3.Timeout(connect=self._connect_timeout_s, read=int(timeout_millis) / 1000.0)
        target = path + ("?" + urlencode(query) if query else "")

        n = len(self._urls)
        max_attempts = max(self._attempts, n)
        # push: new attempts are started until the time budget is spent (module docstring)
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
                resp = self._attempt(base, method, path, target, body, headers, timeout, accept)
            except _Attempt as failed:
                if failed.failover and n > 1:
                    self._mark_unhealthy(idx, failed.error)
                spent = attempt >= max_attempts and (budget_end is None or time.monotonic() >= budget_end)
                if not _may_retry(policy, failed) or spent or self._closed.is_set():
                    self._count("errors")
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

    def _attempt(
        self,
        base: str,
        method: str,
        path: str,
        target: str,
        body: Optional[bytes],
        headers: Mapping[str, str],
        timeout: urllib3.Timeout,
        accept: Optional[Callable[[bytes], Any]] = None,
    ) -> Response:
        pool, prefix = self._host_pool(base)
        log.debug("%s %s%s", method, base, path)
        try:
            resp = pool.urlopen(
                method,
                prefix + target,
                body=body,
                headers=headers,
                timeout=timeout,
                retries=False,
                redirect=False,
                preload_content=False,
                assert_same_host=False,
                pool_timeout=timeout.read_timeout,  # a bounded wait for a free connection
            )
        except NewConnectionError as exc:  # refused / DNS: never sent
            raise _Attempt(
                QueenConnectionError("cannot connect to the Queen broker at %s: %s" % (base, _reason(exc)), url=base),
                sent=False,
                failover=True,
            ) from None
        except ConnectTimeoutError as exc:  # never sent
            raise _Attempt(
                QueenTimeoutError("connect to the Queen broker at %s timed out: %s" % (base, _reason(exc)), url=base),
                sent=False,
                failover=True,
            ) from None
        except ReadTimeoutError:
            raise _Attempt(
                QueenTimeoutError(
                    "%s %s: no reply from the Queen broker at %s within %.0f ms"
                    % (method, path, base, (timeout.read_timeout or 0) * 1000.0),
                    url=base,
                ),
                sent=True,
                failover=True,
            ) from None
        except _U3SSLError as exc:
            if cert_rejected(exc):  # a configuration problem: retrying cannot help
                raise QueenConnectionError(
                    "the TLS certificate of the Queen broker at %s was not accepted: %s (a private CA: "
                    "pass ca_certs= or ssl_context=)" % (base, _reason(exc)),
                    url=base,
                    sent=False,
                ) from None
            if plain_http_answered(exc):  # configuration again: retrying cannot help
                raise QueenConnectionError(
                    "the Queen broker at %s does not speak TLS (%s): is it a plain http:// port?" % (base, _reason(exc)),
                    url=base,
                    sent=False,
                ) from None
            why = _reason(exc)
            hint = " (the broker wants a client certificate: cert_file= or ssl_context=)" if (
                "certificate required" in why.lower()) else ""
            raise _Attempt(
                QueenConnectionError("%s %s: TLS with the Queen broker at %s failed: %s%s" % (
                    method, path, base, why, hint), url=base),
                sent=True,
                failover=True,
            ) from None
        except EmptyPoolError:  # every connection stayed busy for the whole timeout: never sent
            raise _Attempt(
                QueenTimeoutError(
                    "%s %s: no free connection to %s within %.0f ms (pool_maxsize=%d)"
                    % (method, path, base, (timeout.read_timeout or 0) * 1000.0, self._pool_maxsize),
                    url=base,
                ),
                sent=False,
                failover=False,
            ) from None
        except ClosedPoolError:
            raise _Attempt(
                QueenConnectionError("%s %s: the connection pool was closed" % (method, path), url=base),
                sent=False,
                failover=False,
            ) from None
        except (_U3HTTPError, OSError) as exc:
            raise _Attempt(
                QueenConnectionError(
                    "%s %s: connection to the Queen broker at %s broke: %s" % (method, path, base, _reason(exc)), url=base
                ),
                sent=True,
                failover=True,
            ) from None

        status = resp.status
        try:
            if status == 204:
                # A 0.15 broker sends a body with its 204: never reuse this connection.
                conn = resp.connection
                if conn is not None:
                    conn.close()
                data = b""
            else:
                data = resp.read()
        except ReadTimeoutError:
            raise _Attempt(
                QueenTimeoutError("%s %s: reading the reply from %s timed out" % (method, path, base), url=base),
                sent=True,
                failover=True,
            ) from None
        except (_U3HTTPError, OSError) as exc:
            raise _Attempt(
                QueenConnectionError(
                    "%s %s: connection to %s broke while reading the reply: %s" % (method, path, base, _reason(exc)),
                    url=base,
                ),
                sent=True,
                failover=True,
            ) from None
        finally:
            resp.release_conn()

        if 200 <= status < 300:
            if accept is None:
                return Response(status, data, base)
            try:
                value = accept(data)
            except (ProtocolError, QueenConnectionError) as exc:  # an empty / garbled reply: lost
                if isinstance(exc, QueenConnectionError):
                    exc.url = base
                raise _Attempt(exc, sent=True, failover=False) from None
            return Response(status, data, base, value)
        err = _http_error(method, path, base, status, data)
        retry_after: Optional[float] = None
        if status in _REFUSED_STATUSES:
            retry_after = _parse_retry_after(resp.headers.get("Retry-After"))
        setattr(err, "retry_after", retry_after)
        if status >= 500 or status == 429:
            raise _Attempt(err, sent=True, failover=status != 429, status=status, retry_after=retry_after)
        raise err


def _parse_retry_after(value: Optional[str]) -> Optional[float]:
    """``Retry-After`` as seconds (delta-seconds, a decimal, or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        s = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        s = when.timestamp() - time.time()
    if s != s:  # NaN
        return None
    return max(0.0, s)


def _reason(exc: BaseException) -> str:
    r = getattr(exc, "reason", None)
    if r is not None and r is not exc:
        return str(r)
    return str(exc) or type(exc).__name__


def _http_error(method: str, path: str, base: str, status: int, data: bytes) -> QueenHTTPError:
    """Map a non-2xx reply to the matching exception (never raises itself)."""
    body: Any = None
    text: Optional[str] = None
    try:
        body = codec.decode_json(data)
        if isinstance(body, dict) and body.get("error") is not None:
            text = str(body["error"])
    except ProtocolError:
        body = data.decode("utf-8", "replace")[:2048] if data else None
    shown = text if text is not None else (str(body)[:_MAX_ERROR_TEXT] if body else "")
    if status in (401, 403):
        cls: Type[QueenHTTPError] = AuthenticationError
        msg = "%s %s: the Queen broker at %s refused the credentials (HTTP %d)" % (method, path, base, status)
    elif status == 404:
        cls = RouteNotFoundError
        msg = "%s %s: the Queen broker at %s has no such route (HTTP 404)" % (method, path, base)
    else:
        cls = QueenHTTPError
        msg = "%s %s: the Queen broker at %s answered HTTP %d" % (method, path, base, status)
    if shown:
        msg += ": " + shown
    return cls(msg, status=status, error=text, body=body)
