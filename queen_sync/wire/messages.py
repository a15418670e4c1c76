"""Message routes: push, pop, ack, batch ack, lease extend and transaction.

Each function sends one call with a body the codec built (the caller hands the encoded
bytes, so a resend reuses the same ``transactionId`` s) and returns the decoded, checked
reply. Retry policies (see :mod:`queen_sync.transport`): push is resent within its time
budget, also after an empty or garbled reply (ids are client-minted), lease extend freely
(idempotent); pop is resent only after a refusal,
never after a lost reply (it would hold a lease); ack and transaction never once sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import codec
from ..errors import ProtocolError, QueenConnectionError
from ..transport import RETRY_ALWAYS, RETRY_IF_ANSWERED, RETRY_PUSH
from ._base import Requester

__all__ = ["PopSpec", "pop", "push", "ack", "ack_batch", "extend_lease", "transaction"]

Message = Dict[str, Any]


@dataclass(frozen=True)
class PopSpec:
    """One pop request (``GET /api/v1/pop/queue/{q}[/partition/{p}]``); names already
    validated. ``partition`` ``None`` or ``"Default"`` is the wildcard route; times in
    milliseconds."""

    queue: str
    partition: Optional[str] = None
    group: Optional[str] = None
    batch: int = 1
    partitions: Optional[int] = None
    wait: bool = False
    timeout_millis: int = 30000
    subscription_mode: Optional[str] = None
    subscription_from: Optional[str] = None
    auto_ack: bool = False
    #: HTTP read timeout of the request in milliseconds (not sent); None: ``timeout_millis``
    #: plus 5000 for a long poll, else the client's ``timeout_millis``
    read_timeout_millis: Optional[int] = None

    def path(self) -> str:
        """The route of this pop."""
        if self.partition is None or self.partition == "Default":
            return "/api/v1/pop/queue/%s" % self.queue
        return "/api/v1/pop/queue/%s/partition/%s" % (self.queue, self.partition)

    def query(self) -> Dict[str, str]:
        """The query parameters of this pop."""
        q: Dict[str, str] = {"batch": str(self.batch), "wait": "true" if self.wait else "false"}
        if self.wait:
            q["timeout"] = str(self.timeout_millis)
        if self.group is not None:
            q["consumerGroup"] = self.group
        wildcard = self.partition is None or self.partition == "Default"
        if wildcard and self.partitions is not None and self.partitions > 1:
            q["partitions"] = str(self.partitions)
        if self.auto_ack:
            q["autoAck"] = "true"
        if self.subscription_mode is not None:
            q["subscriptionMode"] = self.subscription_mode
        if self.subscription_from is not None:
            q["subscriptionFrom"] = self.subscription_from
        return q


def pop(requester: Requester, spec: PopSpec) -> List[Message]:
    """Send one pop and return its messages (``[]`` when there is nothing to deliver, or a
    204 from a broker in pop maintenance).

    The HTTP read timeout is ``spec.read_timeout_millis`` when set, else
    ``spec.timeout_millis + 5000`` ms for a long poll (``wait``), else the requester's.
    Raises BrokerError (and transport errors) for real failures.
    Wire: ``GET /api/v1/pop/queue/{q}[/partition/{p}]?batch=&wait=&timeout=&consumerGroup=
    &partitions=&autoAck=&subscriptionMode=&subscriptionFrom=``.
    """
    http_timeout = spec.read_timeout_millis
    if http_timeout is None and spec.wait:
        http_timeout = spec.timeout_millis + 5000
    # RETRY_IF_ANSWERED: a pop whose reply was lost holds a lease; it is not resent (see queen_sync.transport)
    resp = requester.request(
        "GET",
        spec.path(),
        query=spec.query(),
        idempotent=False,
        retry=RETRY_IF_ANSWERED,
        timeout_millis=http_timeout,
        affinity_key="%s/%s/%s" % (spec.queue, spec.partition or "*", spec.group or ""),
        long_poll=spec.wait,  # Queen.close() interrupts it (queen_sync.transport._polls)
    )
    if resp.status == 204:  # pop maintenance: "paused", nothing delivered
        return []
    return codec.decode_pop(resp.data)


def push(
    requester: Requester,
    body: bytes,
    *,
    queue: str,
    partition: Optional[str],
    count: int,
    budget: bool = True,
    on_retry: Optional[Callable[[Exception, int], Any]] = None,
) -> Tuple[List[Dict[str, Any]], int, int]:
    """Send one push body of ``count`` items (built by ``codec.encode_push`` /
    ``codec.join_push_fragments``) to ``queue`` / ``partition``.

    The same body (same client-minted ``transactionId`` s) is resent within the push retry
    budget (:data:`~queen_sync.transport.RETRY_PUSH`) after a lost reply, a refused
    connection, a 5xx, and a 2xx reply that is empty (a broker killed while answering) or
    does not hold one result per item: what was stored already is answered ``duplicate``.
    ``budget=False`` (the buffered producer, which resends failed batches itself until it is
    closed): plain :data:`~queen_sync.transport.RETRY_ALWAYS` with ``retry_attempts``, and a
    bad reply raises at once. ``on_retry(error, attempt)``: told of each failed attempt that
    the requester retries (see :meth:`queen_sync.transport.Transport.request`).

    Returns:
        ``(results, http_status, failed)``: exactly one result per item, in input order, and
        how many of them have ``status`` ``"failed"`` (counted while the reply was checked,
        so callers need no pass of their own over the results).

    Raises:
        QueenConnectionError: the budget ran out on lost replies (an empty 2xx body counts
            as one) or unreachable brokers; the outcome is unknown.
        ProtocolError: the budget ran out on replies that do not hold ``count`` results.
        BrokerError: the broker refused the push (``{"error": ...}`` in a 200 body).

    Wire: ``POST /api/v1/push`` ``{"items": [...]}``.
    """

    def accept(data: bytes) -> Tuple[List[Dict[str, Any]], int]:
        if not data:
            raise QueenConnectionError("push: the broker's reply was empty (connection lost?); the outcome is unknown", sent=True)
        return codec.decode_push_reply(data, count)  # one pass: decode, item and count checks, failed count

    key = "%s/%s" % (queue, partition or "Default")
    if not budget:
        resp = requester.request("POST", "/api/v1/push", body=body, retry=RETRY_ALWAYS, affinity_key=key,
                                 on_retry=on_retry)
        results, failed = accept(resp.data)
    else:
        resp = requester.request("POST", "/api/v1/push", body=body, retry=RETRY_PUSH, affinity_key=key, accept=accept,
                                 on_retry=on_retry)
        results, failed = resp.value
    return results, resp.status, failed


def ack(requester: Requester, body: bytes, timeout_millis: Optional[int] = None) -> Tuple[Dict[str, Any], int]:
    """Send one ack (body from ``codec.encode_ack``); ``timeout_millis``: the read timeout
    of the attempt (default: the requester's).

    Returns:
        ``(result, http_status)``, result ``{index, transactionId, success, error, ...}``.

    Raises:
        ProtocolError: the reply does not hold exactly one result.

    Wire: ``POST /api/v1/ack`` (never resent once sent).
    """
    resp = requester.request("POST", "/api/v1/ack", body=body, idempotent=False, timeout_millis=timeout_millis)
    results = codec.decode_ack_result(resp.data)
    if len(results) != 1:
        raise ProtocolError("ack reply has %d items, expected 1" % len(results), resp.data)
    return results[0], resp.status


def ack_batch(
    requester: Requester, body: bytes, count: int, timeout_millis: Optional[int] = None
) -> Tuple[List[Dict[str, Any]], int]:
    """Send one batch ack of ``count`` messages (body from ``codec.encode_ack_batch``);
    ``timeout_millis``: the read timeout of the attempt (default: the requester's).

    Returns:
        ``(results, refused)``: the results, in the order the broker sent them, and how many
        of them have ``success`` other than ``true`` (counted while the reply was read, so
        callers need no pass of their own over the results).

    Raises:
        ProtocolError: the reply does not hold ``count`` results.

    Wire: ``POST /api/v1/ack/batch`` (never resent once sent).
    """
    resp = requester.request("POST", "/api/v1/ack/batch", body=body, idempotent=False, timeout_millis=timeout_millis)
    return codec.decode_ack_reply(resp.data, count)


def extend_lease(
    requester: Requester, lease_id: str, body: bytes, timeout_millis: Optional[int] = None
) -> Dict[str, Any]:
    """Extend one lease (``lease_id`` validated URL-safe; body from ``codec.encode_renew``);
    ``timeout_millis``: the read timeout of each attempt (default: the requester's).

    Returns:
        ``{index, leaseId, success, error, expiresAt}``.

    Raises:
        ProtocolError: the reply does not hold exactly one result.

    Wire: ``POST /api/v1/lease/{leaseId}/extend`` (idempotent: resent freely).
    """
    resp = requester.request(
        "POST", "/api/v1/lease/%s/extend" % lease_id, body=body, idempotent=True, timeout_millis=timeout_millis
    )
    got = codec.decode_renew_result(resp.data)
    if len(got) != 1:
        raise ProtocolError("lease extend reply has %d items, expected 1" % len(got), resp.data)
    return got[0]


def transaction(requester: Requester, body: bytes) -> Tuple[Dict[str, Any], int]:
    """Send one transaction (body from ``codec.encode_transaction``).

    Returns:
        ``(reply, http_status)``, reply ``{success, transactionId, results, error?}``
        (``success: false`` is returned, not raised: the transaction builder tells a
        rejection from a refused retry).

    Wire: ``POST /api/v1/transaction`` (never resent by the transport once sent).
    """
    resp = requester.request("POST", "/api/v1/transaction", body=body, idempotent=False)
    return codec.decode_transaction_result(resp.data), resp.status
