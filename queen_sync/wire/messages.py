"""Message routes: push, pop, ack, batch ack, lease extend and transaction.

Each function sends one call with a body the codec built (the caller hands the encoded
bytes, so a resend reuses the same ``transactionId`` s) and returns the decoded, checked
reply. Retry policies (see :mod:`queen_sync.transport`): push and lease extend are resent
freely (ids are client-minted; extend is idempotent); pop is resent only after a refusal,
never after a lost reply (it would hold a lease); ack and transaction never once sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .. import codec
from ..errors import ProtocolError
from ..transport import RETRY_IF_ANSWERED
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

    The HTTP read timeout is ``spec.timeout_millis + 5000`` ms for a long poll (``wait``),
    else the requester's. Raises BrokerError (and transport errors) for real failures.
    Wire: ``GET /api/v1/pop/queue/{q}[/partition/{p}]?batch=&wait=&timeout=&consumerGroup=
    &partitions=&autoAck=&subscriptionMode=&subscriptionFrom=``.
    """
    http_timeout = spec.timeout_millis + 5000 if spec.wait else None
    # RETRY_IF_ANSWERED: a pop whose reply was lost holds a lease; it is not resent (see transport.py)
    resp = requester.request(
        "GET",
        spec.path(),
        query=spec.query(),
        idempotent=False,
        retry=RETRY_IF_ANSWERED,
        timeout_millis=http_timeout,
        affinity_key="%s/%s/%s" % (spec.queue, spec.partition or "*", spec.group or ""),
    )
    if resp.status == 204:  # pop maintenance: "paused", nothing delivered
        return []
    return codec.decode_pop(resp.data)


def push(
    requester: Requester, body: bytes, *, queue: str, partition: Optional[str], count: int
) -> Tuple[List[Dict[str, Any]], int]:
    """Send one push body of ``count`` items (built by ``codec.encode_push`` /
    ``codec.join_push_fragments``) to ``queue`` / ``partition``.

    Returns:
        ``(results, http_status)``: exactly one result per item, in input order.

    Raises:
        ProtocolError: the reply does not hold ``count`` results (the outcome is unknown;
            resending the same body is safe).

    Wire: ``POST /api/v1/push`` ``{"items": [...]}`` (resent freely: ids are client-minted).
    """
    resp = requester.request(
        "POST", "/api/v1/push", body=body, idempotent=True, affinity_key="%s/%s" % (queue, partition or "Default")
    )
    results, _failed = codec.decode_push_reply(resp.data, count)  # one pass: decode, item and count checks
    return results, resp.status


def ack(requester: Requester, body: bytes) -> Tuple[Dict[str, Any], int]:
    """Send one ack (body from ``codec.encode_ack``).

    Returns:
        ``(result, http_status)``, result ``{index, transactionId, success, error, ...}``.

    Raises:
        ProtocolError: the reply does not hold exactly one result.

    Wire: ``POST /api/v1/ack`` (never resent once sent).
    """
    resp = requester.request("POST", "/api/v1/ack", body=body, idempotent=False)
    results = codec.decode_ack_result(resp.data)
    if len(results) != 1:
        raise ProtocolError("ack reply has %d items, expected 1" % len(results), resp.data)
    return results[0], resp.status


def ack_batch(requester: Requester, body: bytes, count: int) -> List[Dict[str, Any]]:
    """Send one batch ack of ``count`` messages (body from ``codec.encode_ack_batch``).

    Returns:
        the results, in the order the broker sent them.

    Raises:
        ProtocolError: the reply does not hold ``count`` results.

    Wire: ``POST /api/v1/ack/batch`` (never resent once sent).
    """
    resp = requester.request("POST", "/api/v1/ack/batch", body=body, idempotent=False)
    results = codec.decode_ack_result(resp.data)
    if len(results) != count:
        raise ProtocolError("batch ack reply has %d items, expected %d" % (len(results), count), resp.data)
    return results


def extend_lease(requester: Requester, lease_id: str, body: bytes) -> Dict[str, Any]:
    """Extend one lease (``lease_id`` validated URL-safe; body from ``codec.encode_renew``).

    Returns:
        ``{index, leaseId, success, error, expiresAt}``.

    Raises:
        ProtocolError: the reply does not hold exactly one result.

    Wire: ``POST /api/v1/lease/{leaseId}/extend`` (idempotent: resent freely).
    """
    resp = requester.request("POST", "/api/v1/lease/%s/extend" % lease_id, body=body, idempotent=True)
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
