"""Pure-Python codec: the only place (with its compiled twin ``queen_sync._ccodec``) where
Queen wire bodies are built and read.

Both backends expose exactly the functions below and must give byte-identical bodies and
equal decoded values for the same input (see ``tests/test_codec_parity.py``). The client
never imports this module directly: it goes through :mod:`queen_sync.codec`.

Conventions:
- ``id_source`` is an optional zero-argument callable returning a transaction id string; it
  exists so tests can inject deterministic ids. ``None`` mints time-ordered UUIDv7 ids.
- Every ``encode_*`` function returns ``bytes`` (compact UTF-8 JSON) and raises
  :class:`~queen_sync.errors.InvalidInputError` for bad input, before anything is sent.
- Every ``decode_*`` function takes the raw response ``bytes`` and raises
  :class:`~queen_sync.errors.ProtocolError` for a body that is not JSON or not the expected
  shape, and :class:`~queen_sync.errors.BrokerError` for a broker refusal carried in a 200 body.
"""

from __future__ import annotations

import itertools
import os
import re
import sysconfig
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _json
from .errors import BrokerError, InvalidInputError, ProtocolError

__all__ = [
    "new_transaction_id",
    "new_transaction_ids",
    "is_uuid",
    "normalize_status",
    "build_push_items",
    "encode_push_items",
    "encode_push",
    "encode_push_fragment",
    "join_push_fragments",
    "encode_ack",
    "encode_ack_batch",
    "build_tx_push_op",
    "build_tx_ack_op",
    "encode_transaction",
    "encode_renew",
    "encode_json",
    "decode_json",
    "decode_pop",
    "decode_push_result",
    "decode_push_reply",
    "decode_ack_result",
    "decode_ack_reply",
    "decode_transaction_result",
    "decode_renew_result",
    "EMPTY_POP_ERRORS",
    "QUEUE_MODE",
]

QUEUE_MODE = "__QUEUE_MODE__"

#: The longest ``transactionId`` the broker stores (a ``VARCHAR(255)`` column in Queen 0.15).
MAX_TRANSACTION_ID_LENGTH = 255

#: The most seconds a lease extension may ask for (2147483647, about 68 years): the broker
#: reads ``seconds`` as a 32-bit signed integer, so a bigger value would not mean "longer".
MAX_LEASE_SECONDS = 2**31 - 1

#: ``error`` values of a pop reply that mean "nothing to deliver right now", not a failure.
EMPTY_POP_ERRORS = frozenset({"no_available_partition", "partition_not_found", "lease_held"})

_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

#: Ack status strings → wire status (``True`` / ``False`` are handled apart: ``1`` / ``0`` /
#: ``1.0`` hash like them and must not pass).
_STATUS_ALIASES = {
    "completed": "completed",
    "success": "completed",
    "failed": "failed",
    "retry": "retry",
    "dlq": "dlq",
}

_HEX = "0123456789abcdef"


# --------------------------------------------------------------------------- ids


#: Single ids drawn from one ``os.urandom`` call by :class:`RandomPool`.
POOL_IDS = 409
_NO_GIL = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


class RandomPool:
    """The random bytes of ids minted one at a time, drawn from ``os.urandom`` for
    :data:`POOL_IDS` ids at once; each backend holds one (``take`` is also the compiled
    codec's source of randomness, so both draw alike: see the parity suite).

    Why: ``os.urandom`` releases the GIL, and with several threads pushing single items
    into a buffer every such release was a GIL hand-off (about 0.25 context switches per
    push at 8 threads). Safe without a lock: the pool is an immutable tuple replaced whole,
    and its ``itertools.count`` hands out each slot once (one C call under the GIL); the
    pool is drawn again in a forked child (the pid is checked on every take, since a fork
    without Python's hooks -- a uWSGI worker -- must not mint the parent's ids) and when
    ``os.urandom`` is not the function it was drawn from (a test patched it). A free-threaded
    build, and any other length than one id's 10 bytes, calls ``os.urandom`` directly.
    """

    __slots__ = ("_state",)

    def __init__(self) -> None:
        self._state: Tuple[bytes, Any, Any, int] = (b"", itertools.count(), None, 0)

    def take(self, k: int) -> bytes:
        """``k`` random bytes (``os.urandom(k)``, pooled for ``k == 10``)."""
        source = os.urandom
        if k != 10 or type(k) is not int or _NO_GIL:  # 10.0: os.urandom's TypeError, as before
            return source(k)
        buf, slots, drawn_from, pid = self._state
        if drawn_from is source and pid == os.getpid():
            i = next(slots)
            if 10 * i + 10 <= len(buf) and i < POOL_IDS:
                return buf[10 * i : 10 * i + 10]
        buf = source(10 * POOL_IDS)
        self._state = (buf, itertools.count(1), source, os.getpid())
        return buf[:10]


_POOL = RandomPool()


def new_transaction_ids(n: int) -> List[str]:
    """Mint ``n`` UUIDv7 strings (RFC 9562): 48-bit Unix milliseconds, version 7, 74 random
    bits from ``os.urandom`` (pooled for single ids: :class:`RandomPool`). Ids minted in a
    later millisecond sort after earlier ones."""
    ms = time.time_ns() // 1_000_000
    raw = _POOL.take(10 * n)
    out = []
    for i in range(n):
        r = int.from_bytes(raw[10 * i : 10 * i + 10], "big")
        value = (ms << 80) | (0x7 << 76) | ((r >> 68) << 64) | (0x2 << 62) | (r & 0x3FFFFFFFFFFFFFFF)
        h = "%032x" % value
        out.append(h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:])
    return out


def new_transaction_id() -> str:
    """Mint one UUIDv7 string (see :func:`new_transaction_ids`)."""
    return new_transaction_ids(1)[0]


def is_uuid(value: Any) -> bool:
    """True when ``value`` is a str in canonical 8-4-4-4-12 hex UUID form (any version)."""
    # fullmatch: a trailing newline must not pass (``$`` would allow one)
    return isinstance(value, str) and _UUID_RE.fullmatch(value) is not None


def normalize_status(status: Any) -> str:
    """Map an ack status to its wire string.

    ``True``/``"completed"``/``"success"`` → ``"completed"``; ``False``/``"failed"`` →
    ``"failed"``; ``"retry"`` and ``"dlq"`` pass through. Anything else (including ``1``,
    ``0``, ``1.0``, which compare equal to the bools) raises :class:`InvalidInputError`.
    """
    if status is True:
        return "completed"
    if status is False:
        return "failed"
    if isinstance(status, str):
        wire = _STATUS_ALIASES.get(status)
        if wire is not None:
            return wire
    raise InvalidInputError(
        "ack status must be True, False, 'completed', 'success', 'failed', 'retry' or 'dlq', got %r" % (status,)
    )


# --------------------------------------------------------------------------- push


#: The keys a push item may hold (exactly one of the first two).
_PUSH_ITEM_KEYS = ("data", "payload", "transactionId", "traceId")


def _squash(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def _push_item_key_error(index: int, item: Mapping[Any, Any]) -> InvalidInputError:
    """The :class:`InvalidInputError` for push item ``index`` whose keys break the rules of
    :func:`build_push_items` (unknown keys, both or neither of ``data`` / ``payload``).

    Shared by both codec backends (the compiled one calls it on its error path) so that the
    message is the same. Returns the exception; does not raise it.
    """
    problems = []
    unknown = [k for k in item if not (isinstance(k, str) and k in _PUSH_ITEM_KEYS)]
    if unknown:
        names = []
        for k in unknown:
            shown = repr(k)
            if len(shown) > 60:
                shown = shown[:57] + "..."
            if isinstance(k, str):
                for known in _PUSH_ITEM_KEYS:
                    if _squash(k) == _squash(known):
                        shown += " (did you mean %r?)" % known
                        break
            names.append(shown)
        problems.append("unknown key%s %s" % ("s" if len(unknown) > 1 else "", ", ".join(names)))
    has_data = "data" in item
    has_payload = "payload" in item
    if has_data and has_payload:
        problems.append("both 'data' and 'payload' (give the payload once)")
    elif not has_data and not has_payload:
        problems.append("no 'data' (or 'payload') key: wrap the payload as {'data': ...}")
    if not problems:  # a Mapping whose len() disagrees with its keys
        problems.append("inconsistent mapping (len %d, keys %r)" % (len(item), list(item)[:8]))
    return InvalidInputError(
        "item %d: %s; a push item holds exactly one of 'data' / 'payload' and optionally "
        "'transactionId', 'traceId'" % (index, "; ".join(problems))
    )


def _mint(n: int, id_source: Optional[Callable[[], str]]) -> List[str]:
    if id_source is None:
        return new_transaction_ids(n)
    return [id_source() for _ in range(n)]


def build_push_items(
    queue: str,
    partition: Optional[str],
    items: Sequence[Mapping[str, Any]],
    id_source: Optional[Callable[[], str]] = None,
) -> List[Dict[str, Any]]:
    """Turn user items into wire push items, in order.

    Args:
        queue: queue name (already validated by the caller).
        partition: partition name, or ``None`` for the broker's ``"Default"``.
        items: dicts (any ``Mapping``) holding **exactly one** of ``data`` / ``payload``
            (the payload, any JSON value; the two names are synonyms), and optionally
            ``transactionId`` (non-empty str of at most 255 characters, the broker's column; ``None`` or
            absent = minted) and ``traceId``
            (a UUID string of any version; ``None`` = none). No other key is allowed: a
            typo such as ``transactionID`` would otherwise silently lose deduplication.
        id_source: see the module docstring.

    Returns:
        a list of dicts ``{"queue", ["partition"], "payload", "transactionId", ["traceId"]}``.
        A ``transactionId`` is minted for every item that has none.

    Raises:
        InvalidInputError: an item is not a dict, has an unknown key, has both or neither of
            ``data`` / ``payload``, or has a bad ``transactionId`` / ``traceId``; the message
            names the item's index (and the offending keys). Items are checked for type and
            keys before any ``transactionId`` is minted.
    """
    n = len(items)
    missing = 0
    for i in range(n):
        item = items[i]
        if not isinstance(item, Mapping):
            raise InvalidInputError(
                "item %d: a push item must be a dict such as {'data': ...}, got %s" % (i, type(item).__name__)
            )
        has_data = "data" in item
        has_tx = "transactionId" in item
        if has_data == ("payload" in item) or len(item) != 1 + has_tx + ("traceId" in item):
            raise _push_item_key_error(i, item)
        if not has_tx or item["transactionId"] is None:
            missing += 1
    minted = _mint(missing, id_source) if missing else []
    j = 0
    out = []
    for i in range(n):
        item = items[i]
        payload = item["data"] if "data" in item else item["payload"]
        tx = item.get("transactionId")
        if tx is None:
            tx = minted[j]
            j += 1
        elif not isinstance(tx, str) or not tx:
            raise InvalidInputError("item %d: transactionId must be a non-empty str, got %r" % (i, tx))
        elif len(tx) > MAX_TRANSACTION_ID_LENGTH:
            raise InvalidInputError(
                "item %d: transactionId is %d characters; the broker stores at most %d (a longer one fails the "
                "whole push there)" % (i, len(tx), MAX_TRANSACTION_ID_LENGTH)
            )
        wire = {"queue": queue}
        if partition is not None:
            wire["partition"] = partition
        wire["payload"] = payload
        wire["transactionId"] = tx
        trace = item.get("traceId")
        if trace is not None:
            if not is_uuid(trace):
                raise InvalidInputError(
                    "item %d: traceId must be a UUID string (a 0.15 broker loops forever on any other), got %r"
                    % (i, trace)
                )
            wire["traceId"] = trace
        out.append(wire)
    return out


def encode_json(obj: Any, nan_as_null: bool = False) -> bytes:
    """Serialise any body to compact JSON bytes (the rules of :mod:`queen_sync._json`).

    NaN / ±Infinity floats raise :class:`InvalidInputError` naming where they sit, unless
    ``nan_as_null`` is true (then they are written as ``null``). Any other content JSON
    cannot carry (bytes, sets, non-str keys, ints outside ``[-2**63, 2**64 - 1]``, nesting
    deeper than 254) raises :class:`InvalidInputError` too (an out-of-range int and too deep
    a nesting named by their place, ``$.items[0].payload.n``, as a NaN is), and so does a
    string (value or key) holding a NUL character (U+0000), which the broker's PostgreSQL
    store cannot hold.
    """
    try:
        body = _json.dumps(obj, nan_as_null)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInputError("payload is not JSON-serialisable: %s" % _json.encode_error_text(exc, obj)) from None
    if _json.has_nul_escape(body):
        raise InvalidInputError("payload cannot be sent: %s" % _json.nul_error_text(obj))
    return body


def encode_push_items(wire_items: List[Dict[str, Any]], nan_as_null: bool = False) -> bytes:
    """Encode already-built wire items as a ``POST /api/v1/push`` body ``{"items": [...]}``
    (``nan_as_null`` as in :func:`encode_json`)."""
    return encode_json({"items": wire_items}, nan_as_null)


def encode_push(
    queue: str,
    partition: Optional[str],
    items: Sequence[Mapping[str, Any]],
    id_source: Optional[Callable[[], str]] = None,
    nan_as_null: bool = False,
) -> Tuple[bytes, List[str]]:
    """Build and encode a ``POST /api/v1/push`` body ``{"items": [...]}``.

    Returns ``(body, transaction_ids)``: the ``transactionId`` of each item, in order (given
    or minted). See :func:`build_push_items` for the item rules and :func:`encode_json` for
    ``nan_as_null``; the compiled twin writes the same bytes without building the wire dicts.

    Raises:
        InvalidInputError: as :func:`build_push_items` and :func:`encode_json`.
    """
    wire = build_push_items(queue, partition, items, id_source)
    return encode_push_items(wire, nan_as_null), [w["transactionId"] for w in wire]


# --------------------------------------------------------------------------- ack


def _ack_ids(message: Any, where: str) -> Tuple[str, str]:
    if not isinstance(message, Mapping):
        raise InvalidInputError("%s: a message must be a dict as returned by pop(), got %s" % (where, type(message).__name__))
    tx = message.get("transactionId")
    pid = message.get("partitionId")
    if not isinstance(tx, str) or not tx:
        raise InvalidInputError("%s: message has no transactionId" % where)
    if not isinstance(pid, str) or not pid:
        raise InvalidInputError("%s: message has no partitionId" % where)
    return tx, pid


def encode_ack(message: Mapping[str, Any], status: Any, group: Optional[str], error: Optional[str] = None) -> bytes:
    """Encode a ``POST /api/v1/ack`` body for one message.

    ``{"transactionId", "partitionId", "status", "consumerGroup"?, "leaseId"?, "error"?}``:
    ``consumerGroup`` only when ``group`` is given, ``leaseId`` when the message carries a
    non-empty one (so the broker fences the ack), ``error`` when given. The message's own
    ``_status`` / ``_error`` keys override ``status`` / ``error``.
    """
    tx, pid = _ack_ids(message, "ack")
    st = normalize_status(message.get("_status", status))
    err = message.get("_error", error)
    body = {"transactionId": tx, "partitionId": pid, "status": st}
    if group is not None:
        body["consumerGroup"] = group
    lease = message.get("leaseId")
    if lease:
        body["leaseId"] = lease
    if err is not None:
        body["error"] = str(err)
    return encode_json(body)


def encode_ack_batch(
    messages: Sequence[Mapping[str, Any]], status: Any, group: Optional[str], error: Optional[str] = None
) -> bytes:
    """Encode a ``POST /api/v1/ack/batch`` body ``{"acknowledgments": [...], "consumerGroup"?}``.

    The broker applies the body-level group to every item, so all messages must share
    ``group``. An empty list raises :class:`InvalidInputError` (a 0.15 broker never answers it).
    """
    if not messages:
        raise InvalidInputError("refusing to send an empty batch ack (a Queen 0.15 broker never answers one)")
    acks = []
    for i, message in enumerate(messages):
        if isinstance(message, dict):  # the common case: _ack_ids' checks, its error text made only on failure
            tx, pid = message.get("transactionId"), message.get("partitionId")
            if not (isinstance(tx, str) and tx and isinstance(pid, str) and pid):
                _ack_ids(message, "ack item %d" % i)  # raises
        else:
            tx, pid = _ack_ids(message, "ack item %d" % i)
        item = {"transactionId": tx, "partitionId": pid, "status": normalize_status(message.get("_status", status))}
        lease = message.get("leaseId")
        if lease:
            item["leaseId"] = lease
        err = message.get("_error", error)
        if err is not None:
            item["error"] = str(err)
        acks.append(item)
    body: Dict[str, Any] = {"acknowledgments": acks}
    if group is not None:
        body["consumerGroup"] = group
    return encode_json(body)


# --------------------------------------------------------------------------- transaction


def build_tx_push_op(
    queue: str,
    partition: Optional[str],
    items: Sequence[Mapping[str, Any]],
    id_source: Optional[Callable[[], str]] = None,
) -> Dict[str, Any]:
    """Build a transaction push operation ``{"type": "push", "items": [...]}`` (items as in
    :func:`build_push_items`, each with a client-minted ``transactionId``)."""
    if not items:
        raise InvalidInputError("a transaction push needs at least one item")
    return {"type": "push", "items": build_push_items(queue, partition, items, id_source)}


def build_tx_ack_op(
    message: Mapping[str, Any], status: Any, group: Optional[str], error: Optional[str] = None
) -> Dict[str, Any]:
    """Build a transaction ack operation
    ``{"type": "ack", "transactionId", "partitionId", "status", "consumerGroup"?, "leaseId"?,
    "error"?}``.

    The message's ``leaseId`` is always carried when it has one, so the broker rejects the
    whole commit if the lease has expired. ``error`` (sent as ``str(error)`` when not None)
    is the reason a ``failed`` / ``dlq`` ack records as the dead-letter row's
    ``errorMessage`` (a broker writes ``"Unknown error"`` without it).
    """
    tx, pid = _ack_ids(message, "transaction ack")
    op = {"type": "ack", "transactionId": tx, "partitionId": pid, "status": normalize_status(status)}
    if group is not None:
        op["consumerGroup"] = group
    lease = message.get("leaseId")
    if lease:
        op["leaseId"] = lease
    if error is not None:
        op["error"] = str(error)
    return op


def encode_transaction(operations: Sequence[Mapping[str, Any]], nan_as_null: bool = False) -> bytes:
    """Encode a ``POST /api/v1/transaction`` body ``{"operations": [...]}`` (``nan_as_null``
    as in :func:`encode_json`)."""
    if not operations:
        raise InvalidInputError("Transaction has no operations to commit")
    return encode_json({"operations": list(operations)}, nan_as_null)


# --------------------------------------------------------------------------- lease


def encode_renew(seconds: Optional[int] = None) -> bytes:
    """Encode a ``POST /api/v1/lease/{leaseId}/extend`` body: ``{}`` or ``{"seconds": N}``
    (never empty: the broker answers an empty body with 400); ``N`` is 1 to
    :data:`MAX_LEASE_SECONDS` (the broker's 32-bit integer), else InvalidInputError."""
    if seconds is None:
        return b"{}"
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= MAX_LEASE_SECONDS:
        raise InvalidInputError(
            "lease extension must be an int of seconds >= 1 and <= %d, got %r" % (MAX_LEASE_SECONDS, seconds)
        )
    return encode_json({"seconds": seconds})


# --------------------------------------------------------------------------- decoding


def decode_json(body: Any) -> Any:
    """Parse a response body (bytes / str). Raises :class:`ProtocolError` on invalid JSON.

    A body the fast parser refuses is given to ``_json.loads_fallback`` before it is
    declared invalid: numbers beyond a double (``1e400``, a 401-digit integer) decode as
    ``inf`` / exact ints instead of failing the whole reply.
    """
    if not body:
        raise ProtocolError("empty response body", body)
    try:
        return _json.loads(body)
    except (_json.DecodeError, ValueError, TypeError) as exc:
        reason = str(exc)
    try:
        return _json.loads_fallback(body)
    except (ValueError, TypeError, RecursionError):
        raise ProtocolError("response body is not JSON: %s" % reason, body if isinstance(body, bytes) else None) from None


def _refusal(doc: Mapping[str, Any], what: str) -> BrokerError:
    err = doc.get("error")
    return BrokerError("%s refused by the broker: %s" % (what, err), status=200, error=err, body=doc)


def decode_pop(body: Any) -> List[Dict[str, Any]]:
    """Decode a pop reply into its list of message dicts (as the broker sent them:
    ``id, transactionId, partitionId, partition, data, createdAt, leaseId, consumerGroup,
    traceId, producerSub``).

    The "nothing to deliver" replies (``no_available_partition``, ``partition_not_found``,
    ``lease_held``, an expired long poll, pop maintenance's ``paused``) give ``[]``. Any
    other ``error`` raises :class:`BrokerError`.
    """
    doc = decode_json(body)
    if not isinstance(doc, dict):
        raise ProtocolError("pop reply is not a JSON object", body if isinstance(body, bytes) else None)
    messages = doc.get("messages")
    err = doc.get("error")
    if err is not None and not (isinstance(err, str) and err in EMPTY_POP_ERRORS):
        raise _refusal(doc, "pop")
    if messages is None:
        if err is not None:
            return []
        raise ProtocolError("pop reply has no 'messages' list", body if isinstance(body, bytes) else None)
    if not isinstance(messages, list):
        raise ProtocolError("pop reply 'messages' is not a list", body if isinstance(body, bytes) else None)
    for m in messages:
        if not isinstance(m, dict):
            raise ProtocolError("pop reply holds a message that is not an object", body if isinstance(body, bytes) else None)
    return messages


def _decode_list(body: Any, what: str) -> List[Dict[str, Any]]:
    doc = decode_json(body)
    if isinstance(doc, dict):
        if "error" in doc:
            raise _refusal(doc, what)
        raise ProtocolError("%s reply is an object, expected a list" % what, body if isinstance(body, bytes) else None)
    if not isinstance(doc, list):
        raise ProtocolError("%s reply is not a list" % what, body if isinstance(body, bytes) else None)
    for r in doc:
        if not isinstance(r, dict):
            raise ProtocolError("%s reply holds an item that is not an object" % what, body if isinstance(body, bytes) else None)
    return doc


def _decode_counted(body: Any, what: str, count: int, of: str) -> List[Dict[str, Any]]:
    """:func:`_decode_list`, refusing a reply without ``count`` results (``"<what> reply
    has N results for <count> <of>"``)."""
    results = _decode_list(body, what)
    if len(results) != count:
        raise ProtocolError(
            "%s reply has %d results for %d %s" % (what, len(results), count, of), body if isinstance(body, bytes) else None
        )
    return results


def decode_push_result(body: Any) -> List[Dict[str, Any]]:
    """Decode a push reply: a list of ``{index, status, transaction_id, message_id, ...}`` in
    input order. ``{"error": ...}`` raises :class:`BrokerError`."""
    return _decode_list(body, "push")


def decode_push_reply(body: Any, count: int) -> Tuple[List[Dict[str, Any]], int]:
    """Decode and check the reply to a push of ``count`` items in one pass.

    Returns:
        ``(results, failed)``: the results as :func:`decode_push_result` gives them, and how
        many of them have ``status`` ``"failed"``.

    Raises:
        ProtocolError: as :func:`decode_push_result`, or the reply does not hold ``count``
            results (the outcome is unknown; resending the same body is safe).
        BrokerError: the reply is ``{"error": ...}``.
    """
    results = _decode_counted(body, "push", count, "items; the outcome is unknown")
    failed = 0
    for r in results:
        if r.get("status") == "failed":
            failed += 1
    return results, failed


def decode_ack_result(body: Any) -> List[Dict[str, Any]]:
    """Decode an ack / batch-ack reply: a list of ``{index, transactionId, success, error,
    queueName, partitionName, leaseReleased, dlq}``. ``{"error": ...}`` raises
    :class:`BrokerError`. Per-item verdicts are left to the caller."""
    return _decode_list(body, "ack")


def decode_ack_reply(body: Any, count: int) -> Tuple[List[Dict[str, Any]], int]:
    """Decode and check the reply to an ack of ``count`` messages in one pass (the
    consumer's batch acks: no pass of the caller's own over the verdicts).

    Returns:
        ``(results, refused)``: the results as :func:`decode_ack_result` gives them, and how
        many of them have ``success`` other than ``true``.

    Raises:
        ProtocolError: as :func:`decode_ack_result`, or the reply does not hold ``count``
            results.
        BrokerError: the reply is ``{"error": ...}``.
    """
    results = _decode_counted(body, "ack", count, "messages")
    refused = 0
    for r in results:
        if r.get("success") is not True:
            refused += 1
    return results, refused


def decode_renew_result(body: Any) -> List[Dict[str, Any]]:
    """Decode a lease-extend reply: a list of ``{index, leaseId, success, error, expiresAt}``."""
    return _decode_list(body, "lease extend")


def decode_transaction_result(body: Any) -> Dict[str, Any]:
    """Decode a transaction reply ``{success, transactionId, results, error?}`` (returned
    as is; the caller raises on ``success: false``)."""
    doc = decode_json(body)
    if not isinstance(doc, dict):
        raise ProtocolError("transaction reply is not a JSON object", body if isinstance(body, bytes) else None)
    return doc


# --------------------------------------------------------------------------- buffered push


def encode_push_fragment(
    queue: str,
    partition: Optional[str],
    items: Sequence[Mapping[str, Any]],
    id_source: Optional[Callable[[], str]] = None,
    nan_as_null: bool = False,
) -> Tuple[bytes, List[str]]:
    """Build and encode push items as a **fragment**: the comma-separated JSON objects of a
    ``{"items": [...]}`` body, without the brackets (``b""`` for no items).

    Used by the buffered producer: items are encoded (and validated) when pushed, and a batch
    body is :func:`join_push_fragments` of the buffered fragments. Returns ``(fragment,
    transaction_ids)`` (each item's ``transactionId``, in order); item rules as in :func:`build_push_items`, ``nan_as_null`` as in
    :func:`encode_json`.

    Raises:
        InvalidInputError: a bad item, ``transactionId`` / ``traceId``, or a payload that is
            not JSON-serialisable (NaN / ±Infinity included unless ``nan_as_null``).
    """
    wire = build_push_items(queue, partition, items, id_source)
    return encode_json(wire, nan_as_null)[1:-1], [w["transactionId"] for w in wire]


def join_push_fragments(fragments: Sequence[bytes]) -> bytes:
    """Join fragments made by :func:`encode_push_fragment` into one ``POST /api/v1/push`` body
    ``{"items":[...]}``, byte-identical to :func:`encode_push_items` of the same wire items.

    Raises:
        InvalidInputError: no fragment, or an empty one (a push body must hold items).
    """
    if not fragments or not all(fragments):
        raise InvalidInputError("join_push_fragments needs at least one non-empty fragment")
    return b'{"items":[' + b",".join(fragments) + b"]}"

