"""Acknowledging popped messages and extending their leases (``Queen.ack`` / ``Queen.renew``).

An ack settles one message for one consumer group: ``completed``, ``failed`` (nack:
redelivered until the queue's retry limit, then dead-lettered), ``retry`` (redeliver
without counting) or ``dlq``. A list is sent as one batch per effective consumer group
(the broker applies the body-level group to every item of a batch), its acks of one
partition in pop order (:func:`in_pop_order`). A lease renewal moves a pop's lease expiry;
one pop shares one lease.

Calls that hold a partition (acks, releases, renewals) wait at most the requester's
``ack_timeout_millis`` per attempt (a :class:`~queen_sync._session.Session` has it: the
client option, default 5000 ms) instead of the whole HTTP timeout, so a half-open
connection costs seconds while the partition waits; the caller (the consumer) then retries.

Why the order: the broker keeps one cursor per (partition, consumer group), and a
``completed`` ack sets it to the acked message, also backwards; acks that leave the client
out of order make it hand out messages again.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import codec
from ._validate import ack_context, refuse_duplicate_acks, refuse_unleased, resolve_group, validate_path_token
from .errors import AckError, InvalidInputError, LeaseError, QueenError
from .message import note_settled, settled_status
from .wire import messages as wire_messages
from .wire._base import Requester

__all__ = ["ack", "renew", "in_pop_order"]

Message = Dict[str, Any]

# createdAt as the broker writes it: "2026-11-30T06:21:09.002646Z" (the fraction may be shorter)
_CREATED_AT = re.compile(r"^([0-9T:-]+)(?:\.([0-9]{1,9}))?(Z|[+-][0-9:]+)?$")


def _pop_order_key(message: Mapping[str, Any]) -> Optional[Tuple[str, str, str, str]]:
    """The broker's order of a partition's messages, ``(createdAt, id)``, comparable; None
    when the message lacks either (a hand-made dict)."""
    created, mid = message.get("createdAt"), message.get("id")
    if not isinstance(created, str) or not isinstance(mid, str):
        return None
    m = _CREATED_AT.match(created)
    if m is None:
        return None
    return (m.group(1), (m.group(2) or "").ljust(9, "0"), m.group(3) or "Z", mid)


def in_pop_order(items: List[Tuple[int, Message]]) -> List[Tuple[int, Message]]:
    """``(position, message)`` pairs with each partition's messages in pop order (the
    broker's ``(createdAt, id)`` order; partitions in the order they first appear). A
    partition with a message lacking ``createdAt`` / ``id`` keeps the caller's order."""
    by_pid: "OrderedDict[Any, List[Tuple[int, Message]]]" = OrderedDict()
    for item in items:
        by_pid.setdefault(item[1].get("partitionId"), []).append(item)
    out: List[Tuple[int, Message]] = []
    for group in by_pid.values():
        keyed = [(k, item) for k, item in ((_pop_order_key(it[1]), it) for it in group) if k is not None]
        if len(group) > 1 and len(keyed) == len(group):
            keyed.sort(key=lambda pair: pair[0])  # stable: equal keys keep the caller's order
            group = [item for _, item in keyed]
        out.extend(group)
    return out


def ack(
    requester: Requester,
    message: Union[Message, Sequence[Message]],
    status: Union[bool, str] = True,
    context: Optional[Mapping[str, Any]] = None,
    *,
    group: Optional[str] = None,
    error: Optional[str] = None,
) -> Union[Dict[str, Any], List[Dict[str, Any]]]:
    """Acknowledge one message or a list; arguments, return value and errors as
    :meth:`queen_sync.Queen.ack` (``group`` / ``error`` are the keyword forms of the
    context's keys).

    Wire: one message → ``POST /api/v1/ack``; a list → ``POST /api/v1/ack/batch``, one per
    effective consumer group, and a second (or later) one for the acks of a partition that
    follow a nack in the list (see :func:`_ack_in_rounds`).
    """
    group, error = ack_context(context, group, error)
    codec.normalize_status(status)
    if isinstance(message, Mapping):
        refuse_unleased("ack", message)
        eff = resolve_group(message, group)
        body = codec.encode_ack(message, status, eff, error)
        result, http_status = wire_messages.ack(requester, body, _ack_timeout(requester))
        if result.get("success") is True:
            note_settled(message, _settled_as(message, status, result))
        else:
            raise AckError(
                "ack of %s refused by the broker: %s%s"
                % (message.get("transactionId"), result.get("error"), _released_hint([(message, result)], "it")),
                status=http_status,
                error=result.get("error"),
                body=[result],
                results=[result],
                failed=[result],
            )
        return result
    if isinstance(message, (str, bytes)) or not isinstance(message, Sequence):
        raise InvalidInputError("ack() takes a message dict or a list of them, got %s" % type(message).__name__)
    messages = list(message)
    if not messages:
        return []
    batches: "OrderedDict[Optional[str], List[Tuple[int, Message]]]" = OrderedDict()
    placed: List[Tuple[int, Message, Optional[str]]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise InvalidInputError("ack item %d: a message must be a dict, got %s" % (i, type(m).__name__))
        refuse_unleased("ack item %d" % i, m)
        # the codec checks the ids again per batch, but numbers the items within that batch
        # (one per consumer group); this names the item's place in the caller's list
        for key in ("transactionId", "partitionId"):
            value = m.get(key)
            if not isinstance(value, str) or not value:
                raise InvalidInputError("ack item %d: message has no %s" % (i, key))
        eff = resolve_group(m, group)
        placed.append((i, m, eff))
        batches.setdefault(eff, []).append((i, m))
    refuse_duplicate_acks(placed, "ack items", "one ack call settles a message once; remove the duplicate")
    out: List[Optional[Dict[str, Any]]] = [None] * len(messages)
    plans = []
    for eff, items in batches.items():
        first, held = _split(in_pop_order(items), status, set())
        body = codec.encode_ack_batch([m for _, m in first], status, eff, error)
        later = [m for _decider, rest in held.values() for _, m in rest]
        if later:  # every item is checked before anything is sent
            codec.encode_ack_batch(later, status, eff, error)
        plans.append((eff, first, held, body))
    try:
        for eff, first, held, body in plans:
            _ack_in_rounds(requester, first, held, body, status, eff, error, out)
    except QueenError as exc:
        applied = [r for r in out if r is not None]
        if applied and exc.applied is None:
            exc.applied = applied
            add_note = getattr(exc, "add_note", None)  # Python 3.11+
            if add_note is not None:
                add_note("%d of the %d acks were answered before this call failed: see .applied (do not resend those)"
                         % (len(applied), len(messages)))
        raise
    final: List[Dict[str, Any]] = [r for r in out if r is not None]
    failed = [r for r in final if r.get("success") is not True]
    if failed:
        released = [(messages[r["index"]], r) for r in failed]
        raise AckError(
            "%d of %d acks refused by the broker: %s%s"
            % (
                len(failed),
                len(final),
                ", ".join(sorted({str(r.get("error")) for r in failed})),
                _released_hint(released, None),
            ),
            status=200,
            error=failed[0].get("error"),
            body=final,
            results=final,
            failed=failed,
        )
    return final


_RELEASING = ("failed", "retry")  # statuses whose ack may release the partition's lease


Item = Tuple[int, Message]
#: per (partitionId, leaseId): the ack that may release the lease, and the acks held behind it
Held = Dict[Tuple[Any, Any], Tuple[Item, List[Item]]]


def _split(pending: List[Item], status: Union[bool, str], exhausted: set) -> Tuple[List[Item], Held]:
    """One call's acks of ``pending`` (in pop order) and the acks held back for later: within
    one call, nothing of a partition and lease follows an ack that may release the lease
    (``retry``, or ``failed`` unless ``exhausted`` says a nack of it was dead-lettered, so the
    retry count stays reached). Keyed by lease too: an ack under another lease (an older
    pop's) is refused by the broker's lease check before anything is applied."""
    now: List[Item] = []
    held: Held = OrderedDict()  # insertion order: the partitions' order in the list
    for item in pending:
        key = (item[1].get("partitionId"), item[1].get("leaseId"))
        entry = held.get(key)
        if entry is not None:
            entry[1].append(item)
            continue
        now.append(item)
        st = _status_of(item[1], status)
        if st == "retry" or (st == "failed" and key not in exhausted):
            held[key] = (item, [])
    return now, held


def _ack_in_rounds(
    requester: Requester,
    now: List[Item],
    held: Held,
    body: bytes,
    status: Union[bool, str],
    group: Optional[str],
    error: Optional[str],
    out: List[Optional[Dict[str, Any]]],
) -> None:
    """Send the acks of one consumer group as batch calls, the first with ``now`` (encoded as
    ``body``) and ``held`` from :func:`_split`, filling ``out[position]`` with each result
    (``index`` = position).

    Why the rounds: the broker checks every item's lease before it applies any, so an item
    that moves the cursor (``completed``, ``dlq``, or a ``failed`` dead-lettered once the
    retry count is reached) after a released one of its partition would move it past the
    released messages, which would then be neither redelivered nor dead-lettered (Queen
    0.15). The held acks wait for the outcome: if the nack went to the DLQ (the lease is
    still held) or was refused (nothing changed) they go in the next call; if it released
    the lease, a ``failed`` / ``retry`` among them is answered as the broker answers it in
    the same call (``success``, ``leaseReleased``: redelivered with the rest) and any other
    is not sent and reported refused (the broker redelivers it)."""
    exhausted: set = set()  # (partition, lease) with a nack dead-lettered: the count stays reached
    while True:
        results, _refused = wire_messages.ack_batch(requester, body, len(now), _ack_timeout(requester))
        ordered = sorted(results, key=lambda r: r.get("index", 0)) if _has_indexes(results) else results
        for (pos, m), r in zip(now, ordered):
            _record(out, pos, m, dict(r), status)
        pending: List[Item] = []
        for key, ((dpos, decider), rest) in held.items():
            if not rest:
                continue
            verdict = out[dpos] or {}
            if verdict.get("success") is not True:
                pending.extend(rest)  # refused: it changed nothing, the rest get their own verdicts
                continue
            if verdict.get("dlq") is True:
                # dead-lettered: the lease is still held, the cursor on it, and the next
                # nacks of the partition go to the DLQ too (the broker does not reset the count)
                exhausted.add(key)
                pending.extend(rest)
                continue
            for pos, m in rest:
                if _status_of(m, status) in _RELEASING:
                    r = {"success": True, "error": None, "leaseReleased": True, "dlq": False}
                else:
                    r = {"success": False, "leaseReleased": False, "dlq": False,
                         "error": "not sent: the lease of its partition was released by the %s of %s before it "
                                  "(the broker redelivers it)" % (_status_of(decider, status), decider.get("transactionId"))}
                for field in ("queueName", "partitionName"):
                    if field in verdict:
                        r[field] = verdict[field]
                r["transactionId"] = m.get("transactionId")
                _record(out, pos, m, r, status)
        if not pending:
            return
        now, held = _split(pending, status, exhausted)
        body = codec.encode_ack_batch([m for _, m in now], status, group, error)


def _record(out: List[Optional[Dict[str, Any]]], pos: int, m: Message, r: Dict[str, Any],
            status: Union[bool, str]) -> None:
    r["index"] = pos
    out[pos] = r
    if r.get("success") is True:
        note_settled(m, _settled_as(m, status, r))


def renew(
    requester: Requester,
    target: Union[str, Message, Sequence[Union[str, Message]]],
    seconds: Optional[int] = None,
) -> Union[Dict[str, Any], List[Dict[str, Any]]]:
    """Extend leases; arguments, return value and errors as :meth:`queen_sync.Queen.renew`.

    Wire: ``POST /api/v1/lease/{leaseId}/extend`` with ``{}`` or ``{"seconds": N}``, one per lease.
    """
    body = codec.encode_renew(seconds)
    single = isinstance(target, (str, Mapping))
    items = [target] if single else target
    if isinstance(items, bytes) or not isinstance(items, Sequence):
        raise InvalidInputError("renew() takes a lease id, a message or a list of them, got %r" % (target,))
    lease_ids: List[str] = []
    for i, t in enumerate(items):
        if isinstance(t, Mapping):
            lease = t.get("leaseId")
            if not lease:
                raise InvalidInputError("renew item %d: the message has no leaseId (popped with auto-ack?)" % i)
        else:
            lease = t
        lease_id = validate_path_token("lease id", lease)  # the same str, now typed as one
        if lease_id not in lease_ids:
            lease_ids.append(lease_id)
    if not lease_ids:
        return []
    timeout = _ack_timeout(requester)
    results = [wire_messages.extend_lease(requester, lease, body, timeout) for lease in lease_ids]
    failed = [r for r in results if r.get("success") is not True]
    if failed:
        raise LeaseError(
            "lease renewal refused by the broker: %s"
            % ", ".join("%s (%s)" % (r.get("leaseId"), r.get("error")) for r in failed),
            status=200,
            error=failed[0].get("error"),
            body=results,
        )
    return results[0] if single else results


#: The broker's refusal of an ack whose lease is no longer held (expired, or released).
_LEASE_REFUSED = "Invalid or expired lease"
#: How :func:`_released_hint` names the acks of this client that released a lease.
_RELEASED_BY = {"failed": "nacked %s", "retry": "released %s (status retry)"}


def _released_hint(refused: Sequence[Tuple[Any, Mapping[str, Any]]], pronoun: Optional[str]) -> str:
    """The hint an ack error gets when the broker refused acks (``(message, result)`` pairs)
    with ``Invalid or expired lease`` after this client had nacked (or released) those very
    messages, as recorded on the :class:`~queen_sync.Message` objects (``""`` when there are
    none): that released the lease of their pop, and the broker redelivers them.
    ``pronoun`` names a single message (``"it"``); None names the messages by transaction id."""
    by_verb: "OrderedDict[str, List[str]]" = OrderedDict()
    for m, r in refused:
        verb = _RELEASED_BY.get(settled_status(m) or "")
        if verb is not None and r.get("error") == _LEASE_REFUSED:
            by_verb.setdefault(verb, []).append(str(m.get("transactionId")))
    if not by_verb:
        return ""
    done = "; ".join(verb % (pronoun or ", ".join(ids)) for verb, ids in by_verb.items())
    its, acks, them, copies = ("its", "this ack comes", "it", "copy") if pronoun else ("their", "their acks come", "them", "copies")
    return (
        " (this client already %s: that released the lease of %s pop, so %s too late; the broker "
        "redelivers %s: ack the redelivered %s)" % (done, its, acks, them, copies)
    )


def _status_of(message: Mapping[str, Any], status: Union[bool, str]) -> str:
    """The status an ack of ``message`` sent: its own ``_status`` key wins (as in the codec)."""
    return codec.normalize_status(message.get("_status", status))


def _settled_as(message: Mapping[str, Any], status: Union[bool, str], result: Mapping[str, Any]) -> str:
    """The status to record for an accepted ack (:func:`note_settled`): ``dlq`` for a nack
    the broker dead-lettered (the lease is still held: the consumer acks the rest of the
    batch), else the status sent."""
    return "dlq" if result.get("dlq") is True else _status_of(message, status)


def _ack_timeout(requester: Requester) -> Optional[int]:
    """The per-attempt timeout of the calls that hold a partition, in milliseconds: the
    requester's ``ack_timeout_millis`` (a Session's), else None (its default timeout)."""
    timeout = getattr(requester, "ack_timeout_millis", None)
    return timeout if isinstance(timeout, int) else None


def _has_indexes(results: List[Dict[str, Any]]) -> bool:
    return all(isinstance(r.get("index"), int) for r in results)
