"""One HTTP attempt of a call on one broker, :func:`send_once`: the urllib3 request, its
outcome told apart (never sent, sent and lost, a 2xx reply, a non-2xx reply) and returned
as a :class:`Response`, raised as the final :class:`QueenError`, or raised as an
:class:`_Attempt` that :meth:`Transport.request` may retry or fail over; and the mapping of
non-2xx replies onto the error tree (:func:`_http_error`).

Logging goes to the ``queen_sync.transport`` logger (never the request headers).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Type

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

from .. import codec
from .._tls import cert_rejected, plain_http_answered
from ..errors import (
    AuthenticationError,
    ProtocolError,
    QueenConnectionError,
    QueenHTTPError,
    QueenTimeoutError,
    RouteNotFoundError,
)
from ._retry import _REFUSED_STATUSES, _Attempt, _parse_retry_after

__all__ = ["Response", "send_once"]

log = logging.getLogger("queen_sync.transport")

_MAX_ERROR_TEXT = 300


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


def send_once(
    pool: Any,
    prefix: str,
    pool_maxsize: int,
    base: str,
    method: str,
    path: str,
    target: str,
    body: Optional[bytes],
    headers: Mapping[str, str],
    timeout: urllib3.Timeout,
    accept: Optional[Callable[[bytes], Any]] = None,
) -> Response:
    """Send one attempt of a call to broker ``base`` through its urllib3 connection ``pool``
    (``prefix``: the URL's path prefix; ``pool_maxsize`` only names the bound in an error).

    Returns the 2xx :class:`Response`; raises :class:`_Attempt` for a failure the retry
    loop judges (``sent``: may the broker have seen it; ``failover``: try another URL),
    and the final error at once for one retrying cannot help (a bad TLS setup, a 4xx but 429).
    """
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
                % (method, path, base, (timeout.read_timeout or 0) * 1000.0, pool_maxsize),
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
