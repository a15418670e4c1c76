"""The one HTTP transport of queen_sync: a urllib3 ``PoolManager`` shared by every thread.

- One pool per broker URL, ``maxsize`` connections kept alive per host (64 by default, so
  many threads can talk to the broker at once without opening a socket per request).
- urllib3's own retries are off (``retries=False``); :meth:`Transport.request` runs its own
  loop with capped exponential backoff and jitter:

  * connection errors where the request was never sent (refused, DNS, connect timeout) are
    always retried, and fail over to the next broker URL (round-robin);
  * read errors, read timeouts and 5xx replies are retried only for idempotent calls
    (GET, push, configure, delete, lease extend);
  * 4xx replies are never retried.

- Any 2xx reply is success at this level; callers decide from the body (a Queen 0.15 broker
  answers most refusals with 200). Non-2xx replies raise :class:`QueenHTTPError` and its
  subclasses. After a 204 the connection is dropped, never reused (a 0.15 broker sends a
  body with its 204, which would desynchronise a keep-alive connection).
- Every POST carries a body (``{}`` at least): the broker answers an empty one with 400.
- Fork-safe: a child process builds a fresh pool on its first request (``os.getpid()`` is
  checked on each request).

Logging goes to the ``queen_sync.transport`` logger; request headers (and so the
``Authorization`` header) are never logged.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import threading
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple
from urllib.parse import urlencode

import urllib3
from urllib3.exceptions import (
    ClosedPoolError,
    ConnectTimeoutError,
    HTTPError as _U3HTTPError,
    NewConnectionError,
    ReadTimeoutError,
)

from . import codec
from .errors import (
    AuthenticationError,
    ClientClosedError,
    ProtocolError,
    QueenConnectionError,
    QueenHTTPError,
    QueenTimeoutError,
    RouteNotFoundError,
)

__all__ = ["Transport", "Response", "DEFAULT_POOL_MAXSIZE"]

log = logging.getLogger("queen_sync.transport")

#: Connections kept alive per broker host.
DEFAULT_POOL_MAXSIZE = 64

_USER_AGENT = "queen-sync/0.1.0"
_MAX_ERROR_TEXT = 300


@dataclass(frozen=True)
class Response:
    """A broker reply with a 2xx status.

    Attributes:
        status: the HTTP status (200, 201, 204, ...).
        data: the raw body bytes (``b""`` after a 204: its body is discarded with the connection).
        url: the broker base URL that answered.
    """

    status: int
    data: bytes
    url: str


class _Attempt(Exception):
    """Internal: one failed attempt, with what the retry loop needs to know."""

    def __init__(self, error: Exception, *, sent: bool, failover: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.sent = sent
        self.failover = failover


class Transport:
    """Thread-safe HTTP client for one or more broker base URLs.

    Args:
        urls: validated base URLs (``http(s)://host:port[/prefix]`` without a trailing slash).
        timeout_millis: connect and read timeout of each attempt, in milliseconds.
        retry_attempts: total attempts per call (at least 1; with several URLs, every URL is
            tried at least once on connection errors).
        retry_delay_millis: first backoff delay in milliseconds; doubles per retry, with jitter.
        retry_max_delay_millis: cap of one backoff delay, in milliseconds.
        bearer_token: sent as ``Authorization: Bearer <token>``; never logged nor shown.
        headers: extra request headers, applied after the defaults (they may override them).
        pool_maxsize: connections kept alive per broker host.
        connect_timeout_millis: connect timeout in milliseconds (default: ``min(timeout_millis, 10000)``).
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
    ) -> None:
        if not urls:
            raise ValueError("at least one broker URL is needed")
        self._urls: Tuple[str, ...] = tuple(urls)
        self._timeout_millis = int(timeout_millis)
        self._connect_timeout_s = (
            min(self._timeout_millis, 10000) if connect_timeout_millis is None else int(connect_timeout_millis)
        ) / 1000.0
        self._attempts = max(1, int(retry_attempts))
        self._delay_s = max(0, int(retry_delay_millis)) / 1000.0
        self._max_delay_s = max(0, int(retry_max_delay_millis)) / 1000.0
        self._pool_maxsize = max(1, int(pool_maxsize))
        base_headers: Dict[str, str] = {
            "Accept": "application/json",
            "User-Agent": _USER_AGENT,
        }
        if bearer_token:
            base_headers["Authorization"] = "Bearer %s" % bearer_token
        if headers:
            for k, v in headers.items():
                base_headers[str(k)] = str(v)
        self._headers = base_headers
        self._post_headers = dict(base_headers)
        self._post_headers.setdefault("Content-Type", "application/json")
        self._rr = itertools.count()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._pool = self._new_pool()

    # ------------------------------------------------------------------ pool

    def _new_pool(self) -> urllib3.PoolManager:
        return urllib3.PoolManager(
            num_pools=max(10, 2 * len(self._urls)),
            maxsize=self._pool_maxsize,
            block=False,
            retries=False,
        )

    def _get_pool(self) -> urllib3.PoolManager:
        pid = os.getpid()
        if pid != self._pid:
            # A forked child: the parent's sockets must not be shared. The inherited lock may
            # be held by a thread that does not exist here, so a new one is made too.
            self._lock = threading.Lock()
            self._pool = self._new_pool()
            self._pid = pid
            log.debug("new connection pool after fork (pid %d)", pid)
        return self._pool

    @property
    def urls(self) -> Tuple[str, ...]:
        """The broker base URLs, in configuration order."""
        return self._urls

    @property
    def timeout_millis(self) -> int:
        """Default per-attempt timeout, in milliseconds."""
        return self._timeout_millis

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

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

    # ------------------------------------------------------------------ request

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Optional[bytes] = None,
        query: Optional[Mapping[str, Any]] = None,
        idempotent: bool,
        timeout_millis: Optional[int] = None,
    ) -> Response:
        """Send one call, with retries and failover, and return the 2xx reply.

        Args:
            method: ``GET``, ``POST`` or ``DELETE``.
            path: the route, starting with ``/`` (already validated / URL-safe).
            body: the JSON body bytes; a POST without one sends ``{}``.
            query: query parameters (values already strings), or ``None``.
            idempotent: whether a read error, read timeout or 5xx may be retried.
            timeout_millis: read timeout of this call in milliseconds (default: the client's).

        Returns:
            the :class:`Response` (any 2xx status).

        Raises:
            ClientClosedError: the transport was closed.
            QueenConnectionError: the broker could not be reached or the connection broke.
            QueenTimeoutError: a connect or read timeout.
            AuthenticationError: 401 / 403. RouteNotFoundError: 404.
            QueenHTTPError: any other non-2xx reply.
        """
        if self._closed.is_set():
            raise ClientClosedError("the Queen client is closed")
        method = method.upper()
        if method == "POST" and not body:
            body = b"{}"
        headers = self._post_headers if body is not None else self._headers
        read_s = (self._timeout_millis if timeout_millis is None else int(timeout_millis)) / 1000.0
        timeout = urllib3.Timeout(connect=self._connect_timeout_s, read=read_s)
        target = path + ("?" + urlencode(query) if query else "")

        n = len(self._urls)
        max_attempts = max(self._attempts, n)
        idx = next(self._rr) % n
        tried = set()
        retry_no = 0
        attempt = 0
        while True:
            base = self._urls[idx]
            tried.add(idx)
            attempt += 1
            try:
                return self._attempt(base, method, path, target, body, headers, timeout)
            except _Attempt as failed:
                retryable = (not failed.sent) or idempotent
                if not retryable or attempt >= max_attempts or self._closed.is_set():
                    if self._closed.is_set() and not failed.sent:
                        raise ClientClosedError("the Queen client is closed") from None
                    raise failed.error from None
                if failed.failover and n > 1:
                    idx = (idx + 1) % n
                if idx in tried:
                    delay = self._backoff(retry_no)
                    retry_no += 1
                else:
                    delay = 0.0
                log.warning(
                    "%s %s to %s failed (%s); attempt %d of %d, retrying%s in %.0f ms",
                    method,
                    path,
                    base,
                    failed.error,
                    attempt,
                    max_attempts,
                    (" on " + self._urls[idx]) if self._urls[idx] != base else "",
                    delay * 1000.0,
                )
                if delay > 0 and self._closed.wait(delay):
                    raise ClientClosedError("the Queen client was closed while retrying") from None

    def _backoff(self, retry_no: int) -> float:
        """Capped exponential backoff with 'equal jitter': in [d/2, d], d = base * 2**n."""
        d = min(self._max_delay_s, self._delay_s * (2 ** min(retry_no, 30)))
        return d / 2.0 + random.random() * d / 2.0

    def _attempt(
        self,
        base: str,
        method: str,
        path: str,
        target: str,
        body: Optional[bytes],
        headers: Mapping[str, str],
        timeout: urllib3.Timeout,
    ) -> Response:
        url = base + target
        pool = self._get_pool()
        log.debug("%s %s%s", method, base, path)
        try:
            resp = pool.urlopen(
                method,
                url,
                body=body,
                headers=headers,
                timeout=timeout,
                retries=False,
                redirect=False,
                preload_content=False,
                assert_same_host=False,
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
            return Response(status, data, base)
        err = _http_error(method, path, base, status, data)
        if status >= 500:
            raise _Attempt(err, sent=True, failover=False)
        raise err


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
        cls: type = AuthenticationError
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
