"""The exception hierarchy of queen_sync.

Every exception this package raises on purpose derives from :class:`QueenError`::

    QueenError
    ├── InvalidInputError        bad arguments, caught before anything is sent (also a ValueError)
    ├── ProtocolError            a response body that is not what a Queen broker sends
    ├── ClientClosedError        the Queen client was closed
    ├── BufferFullError          a bounded producer buffer stayed full past its timeout
    ├── QueenConnectionError     the broker could not be reached, or the connection broke
    │   └── QueenTimeoutError    a connect or read timeout (also a TimeoutError)
    └── BrokerError              the broker answered, and refused
        ├── QueenHTTPError       ... with a non-2xx HTTP status
        │   ├── AuthenticationError   401 / 403
        │   └── RouteNotFoundError    404: the broker has no such route
        ├── AckError             an ack / nack the broker refused (per-item verdicts)
        ├── LeaseError           a lease renewal the broker refused
        ├── TransactionError     a transaction the broker rejected (rolled back)
        └── StreamsError         a streams route refused (register, cycle, state read)
            ├── StreamsConfigHashError   the query exists with another operator chain
            └── StreamsCycleError        a cycle the broker rolled back (``lease_refused``)

A Queen 0.15 broker answers most failures with HTTP 200 and ``success: false`` or an
``error`` key in the body; those become :class:`BrokerError` subclasses too.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

__all__ = [
    "QueenError",
    "InvalidInputError",
    "ProtocolError",
    "ClientClosedError",
    "BufferFullError",
    "QueenConnectionError",
    "QueenTimeoutError",
    "BrokerError",
    "QueenHTTPError",
    "AuthenticationError",
    "RouteNotFoundError",
    "AckError",
    "LeaseError",
    "TransactionError",
    "StreamsError",
    "StreamsConfigHashError",
    "StreamsCycleError",
]


class QueenError(Exception):
    """Root of every error raised by queen_sync.

    Attributes:
        items: set on an error raised by an unbuffered ``push()`` once its items were built:
            the pushed items as sent, each ``{"payload", "transactionId"[, "traceId"]}`` with
            the ``transactionId`` fixed before the first attempt. ``push(err.items)`` to the
            same queue/partition is the safe re-push: what the broker already stored is
            answered ``duplicate``. ``None`` on every other error.
        applied: set on an error raised by ``Queen.ack(list)`` after some of its calls were
            answered (a list spanning consumer groups, or a partition's acks after a nack,
            takes more than one call): the results of those, ``index`` = the list position,
            as the return value would hold them. Do not resend those acks (a nack resent
            after a dead letter is dead-lettered twice). ``None`` on every other error.
    """

    items: Optional[List[Dict[str, Any]]] = None
    applied: Optional[List[Dict[str, Any]]] = None


class InvalidInputError(QueenError, ValueError):
    """An argument is invalid; raised before any request is sent."""


class ProtocolError(QueenError):
    """A response body could not be decoded, or has a shape a Queen broker never sends.

    Attributes:
        body: the raw response bytes (possibly truncated to 2 KiB), or ``None``.
    """

    def __init__(self, message: str, body: Optional[bytes] = None) -> None:
        super().__init__(message)
        self.body = body[:2048] if isinstance(body, (bytes, bytearray)) else body


class ClientClosedError(QueenError):
    """The :class:`~queen_sync.Queen` client (or a buffer of it) was closed."""


class BufferFullError(QueenError):
    """A bounded producer buffer stayed full for longer than the push timeout."""


class QueenConnectionError(QueenError):
    """The broker could not be reached, or the connection broke before a full reply.

    Attributes:
        url: the broker base URL that failed (no credentials), or ``None``.
        sent: ``False`` when the request certainly never reached the broker (refused,
            connect timeout), ``True`` when it may have (the connection broke or timed out
            after sending), ``None`` when unknown.
    """

    def __init__(self, message: str, url: Optional[str] = None, sent: Optional[bool] = None) -> None:
        super().__init__(message)
        self.url = url
        self.sent = sent


class QueenTimeoutError(QueenConnectionError, TimeoutError):
    """A connect or read timeout expired."""


class BrokerError(QueenError):
    """The broker answered and refused the request.

    Attributes:
        status: the HTTP status of the reply (a Queen 0.15 broker says 200 for most refusals).
        error: the broker's ``error`` text, when it gave one.
        body: the decoded reply body (dict / list) or raw text.
    """

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        error: Optional[str] = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.body = body


class QueenHTTPError(BrokerError):
    """The broker answered with a non-2xx HTTP status."""


class AuthenticationError(QueenHTTPError):
    """401 (no or bad token) or 403 (insufficient permissions)."""


class RouteNotFoundError(QueenHTTPError):
    """404: the broker has no such route (a 0.15 broker answers with an HTML page)."""


class AckError(BrokerError):
    """An ack or nack was refused by the broker.

    Attributes:
        results: the broker's per-item results (list of dicts), in request order.
        failed: the subset of ``results`` whose ``success`` is false.
    """

    def __init__(self, message: str, *, results: Any = None, failed: Any = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.results = results if results is not None else []
        self.failed = failed if failed is not None else []


class LeaseError(BrokerError):
    """A lease renewal was refused (``Lease not found``, ``Lease already expired``)."""


class TransactionError(BrokerError):
    """The broker rejected a transaction; nothing of it was applied.

    Attributes:
        result: the broker's full reply dict (``success: false``, ``error``, ``results``);
            None when the client sent nothing (below).
        maybe_committed: True when this rejection answers a *retried* commit whose earlier
            attempt may have been applied (its reply was lost) and the rejection is what such
            an earlier commit causes (its push ``transactionId`` s already exist, or its ack's
            lease is gone): the earlier attempt was most likely committed, treat it as done.
            Also True, with nothing sent, when the client refused to resend such a commit
            because a copy could be applied twice (no push, acks only: a ``failed`` / ``dlq``
            ack would dead-letter the message again, a ``completed`` one would count twice
            toward its pop's batch); if the earlier attempt was not applied, the message is
            redelivered once its lease expires.
            False otherwise (then nothing of the transaction was ever applied).
    """

    def __init__(self, message: str, *, result: Any = None, maybe_committed: bool = False, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.result = result
        self.maybe_committed = maybe_committed


class StreamsError(BrokerError):
    """A ``/streams/v1/*`` route refused the request (a 0.15 broker says HTTP 200 and
    ``success: false``), or a stream runner could not start.

    Attributes:
        query: the query name (``query_id`` given to ``Stream.run``), when known.
    """

    def __init__(self, message: str, *, query: Optional[str] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.query = query


class StreamsConfigHashError(StreamsError):
    """The query is registered with another operator chain (config hash) and ``reset`` was
    not asked for: nothing was changed and nothing started. Remedy: ``run(..., reset=True)``
    (wipes the query's state; the source cursor is kept) or a new ``query_id``.

    Attributes:
        config_hash: the hash this client sent.
    """

    def __init__(self, message: str, *, config_hash: Optional[str] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.config_hash = config_hash


class StreamsCycleError(StreamsError):
    """The broker rolled a cycle back: none of its state ops, sink pushes or ack was applied.

    Attributes:
        lease_refused: True when the ack's lease was refused (``Invalid or expired lease``):
            after a resend this means the first copy may have committed.
    """

    @property
    def lease_refused(self) -> bool:
        return isinstance(self.error, str) and "Invalid or expired lease" in self.error
