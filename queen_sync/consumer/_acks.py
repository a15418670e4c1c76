"""Acks: sending the verdicts, reading every reply, lost replies, releases.

With auto-ack (the default) a handler that returns acks ``completed`` and a handler that
raises nacks ``failed`` with the exception text (the broker redelivers until the queue's
``retryLimit``, then moves the message to the dead-letter queue); the handler side of that
rule lives in ``_lanes``. Every ack verdict is read: one the broker refuses (``Invalid or
expired lease``, ``Message not found``) is logged with the message ids and counted as an
ack failure, never as success; an expired lease (the handler outlived it) is logged with
what to do: ``renew_lease(True)`` or a longer ``lease_time`` for the queue. Transient failures are retried with backoff (``_outage``)
until the stop phase aborts retries (at the drain timeout, or at once when the consumer
stops with reason ``"unreachable"``); an ack or nack given up that way counts in
``uncertain`` (a release given up counts as an ack failure: the broker redelivers). An
authentication refusal (401/403) of an ack, nack or release stops the consumer with that
error (reason ``"error"``), as one of a pop does: no later ack could land either.

Lost ack replies: the broker releases a partition's lease once it has counted as many acks
as the pop delivered messages of that partition, and it counts a resent copy twice. So in
``each()`` mode an ack whose reply was lost while later messages of the same partition and
pop are still to be acked is **not** resent (a copy that did land would free the lease while
the batch is still being handled); it counts in ``ack_uncertain`` until a later ack of the
partition moves its cursor past it (then in ``acked``). If the reply to the last ack of the
batch says the lease is still held (a lost ack never arrived), the last message is acked
again, at most once per such ack, until the broker releases the lease (an earlier ack is not
resent: it would move the partition's cursor back). Any other ack, nack or release whose
reply was lost is resent. A resent copy refused with ``Invalid or expired lease`` proves
nothing: the first copy may have landed (it released the lease) or never arrived while the
lease expired (the broker redelivers the message), so such an ack counts in
``ack_uncertain`` and such a nack in ``uncertain``; a release counts as done (either way
the message is free to be redelivered).

Releases (:meth:`Acks.release_units`) hand popped messages back unhandled with ack status
``retry`` (the broker redelivers them without counting a retry); only releases the broker
confirmed count as ``released``.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Set, Tuple

from ..errors import AuthenticationError, ClientClosedError
from ._calls import Broker
from ._log import ids, log
from ._outage import backoff, maybe_sent, transient
from ._state import ConsumerState, Message, Unit

__all__ = ["Acks", "INVALID_LEASE", "moved_cursor"]

#: The broker's refusal of an ack whose lease is no longer held.
INVALID_LEASE = "Invalid or expired lease"


def moved_cursor(results: Optional[List[Dict[str, Any]]], ok: bool) -> bool:
    """Whether an ack's results show it moved the partition's cursor: every item accepted and
    applied (not an unresent ack whose reply was lost), as ``completed`` or as a nack that
    moved the message to the dead-letter queue."""
    if not results or any(r.get("success") is not True or r.get("uncertain") for r in results):
        return False
    return ok or all(r.get("dlq") is True for r in results)


def _tally(results: List[Dict[str, Any]]) -> Tuple[int, int, int, bool]:
    """``(refused, abandoned, uncertain, lease_gone)`` of an ack's results, in one pass:
    refused by the broker, given up on (outcome unknown), not resent after a lost reply, and
    whether a refusal says the lease is gone."""
    refused = abandoned = unsure = 0
    lease_gone = False
    for r in results:
        if r.get("success") is not True:
            if r.get("abandoned"):
                abandoned += 1
            else:
                refused += 1
                if r.get("error") == INVALID_LEASE:
                    lease_gone = True
        elif r.get("uncertain"):
            unsure += 1
    return refused, abandoned, unsure, lease_gone


class Acks:
    """The ack path of one consumer.

    Args:
        state: the consumer's shared state (counters, leases, stop request, room).
        broker: its broker calls (``ack`` only).
        group: the consumer group (sent in every ack's context), None in queue mode.
        renews: whether the consumer renews its leases (``renew_lease(True)``): an ack
            refused for an expired lease then gets no "enable renewal" hint.

    Used by the lanes (:meth:`ack` after a handler, :meth:`release_units` when aborting),
    the fetchers (releasing a pop that came back after a stop request) and the stop phase
    (releasing what no handler got by the drain timeout).
    """

    def __init__(self, state: ConsumerState, broker: Broker, group: Optional[str], renews: bool = False) -> None:
        self._st = state
        self._broker = broker
        self._group = group
        self._renews = renews

    def ack(self, msgs: List[Message], unit: Unit, ok: bool, error: Optional[str]) -> bool:
        """Ack / nack after the handler; resolve the messages. Returns False when the rest of
        the unit must not be handled: a nack released the partition, or the lease is gone."""
        lease = unit.lease
        verb = "ack" if ok else "nack"
        with self._st.lock:
            lost_now = lease is not None and lease.lost
            if lease is not None and not lost_now:
                lease.acks_in_flight += 1
        if lost_now:
            log.warning(
                "not %sing %d handled message(s) of queue %r: their lease was lost, the broker redelivers them: %s",
                verb,
                len(msgs),
                self._st.queue,
                ids(msgs),
            )
            self._st.resolve(msgs, unit, lost=True)
            return False
        last = unit.pos >= len(unit.msgs)  # no message of this partition's batch after these
        results: Optional[List[Dict[str, Any]]] = None
        clean = False
        try:
            if ok or len(msgs) == 1:
                results, clean = self._send_ack(msgs, ok, error, verb, covered_later=ok and not last)
            else:
                results, clean = self._send_nack(msgs, error, verb)
            if (
                last
                and unit.unsure
                and lease is not None
                and moved_cursor(results, ok)
                and not any(r.get("leaseReleased") is True for r in results or ())
            ):
                self._complete_batch_count(unit, msgs[-1])
        finally:
            if clean:  # every item accepted (the common case): no pass over the results
                n_refused = n_abandoned = n_unsure = 0
                lease_gone = False
                moved = ok or moved_cursor(results, ok)
            elif results is None:
                n_refused, n_abandoned, n_unsure, lease_gone, moved = len(msgs), 0, 0, False, False
            else:
                n_refused, n_abandoned, n_unsure, lease_gone = _tally(results)
                moved = moved_cursor(results, ok)
            # a nack releases the partition, unless it moved the message to the dead-letter
            # queue (retries exhausted): then the cursor moved on and the lease is still held
            released = not ok and not (results and all(r.get("dlq") is True for r in results))
            st = self._st
            with st.lock:
                stats = st.stats
                if n_refused:
                    stats.ack_failures += n_refused
                if n_abandoned:
                    stats.uncertain += n_abandoned
                if ok:
                    stats.acked += len(msgs) - n_refused - n_unsure - n_abandoned
                    stats.ack_uncertain += n_unsure
                else:
                    stats.nacked += len(msgs) - n_refused - n_abandoned
                if n_unsure:
                    unit.unsure += n_unsure
                    unit.unconfirmed += n_unsure
                elif moved and unit.unconfirmed:
                    # this ack moved the partition's cursor past the earlier messages whose
                    # ack is unconfirmed: they count as consumed now
                    stats.ack_uncertain -= unit.unconfirmed
                    stats.acked += unit.unconfirmed
                    unit.unconfirmed = 0
                if lease is not None:
                    lease.acks_in_flight -= 1
                    if released:
                        lease.released.add(unit.pid)
                    if lease_gone:
                        lease.lost = True
                    if lease.acks_in_flight == 0:
                        st.acks_settled_locked()
                st.resolve_locked(msgs, unit)
        return not released and not lease_gone

    def _send_nack(
        self, msgs: List[Message], error: Optional[str], verb: str
    ) -> Tuple[Optional[List[Dict[str, Any]]], bool]:
        """Nack several messages of one partition's batch: the first alone, then the rest
        only if that one went to the dead-letter queue (:meth:`_send_ack` each; same return).

        Why not one batch nack: the broker checks every item's lease before it applies any,
        so when the first nack releases the lease and counts the retry that reaches the
        queue's ``retryLimit``, the later items go to the DLQ and move the cursor past the
        first message, which is then neither redelivered nor dead-lettered (Queen 0.15). The
        first nack decides for the whole batch anyway: released (the rest are redelivered
        with it, as the broker answers for them) or dead-lettered (the retry count stays
        reached, so the rest go to the DLQ too, each with its own cursor move)."""
        first, clean = self._send_ack(msgs[:1], False, error, verb)
        if first is None:
            return None, False
        head = first[0]
        if head.get("success") is True and head.get("dlq") is True:
            rest, rest_clean = self._send_ack(msgs[1:], False, error, verb)
            if rest is None:  # not sent (logged): the broker redelivers them after the lease
                rest = [{"transactionId": m.get("transactionId"), "success": False, "error": "not sent"} for m in msgs[1:]]
            return first + rest, clean and rest_clean
        # released (or refused, or unknown): the rest share its outcome, as in one batch call
        return first + [dict(head, transactionId=m.get("transactionId")) for m in msgs[1:]], clean

    def _complete_batch_count(self, unit: Unit, last: Message) -> None:
        """The last message of a partition's batch was acked, but the broker still holds the
        lease: an earlier ack whose reply was lost (not resent, see :meth:`_send_ack`) never
        reached it, so its count of the batch is short and the partition would stay locked
        until the lease expires. Re-ack the last message until the broker releases the lease
        (at most once per such ack). Not a resend of the earlier ack: that would move the
        partition's cursor back (the broker sets it to the acked message) and the messages
        after it would be redelivered. A surplus count can only release the lease, which is
        no longer needed (every message of the batch is handled and acked)."""
        n = unit.unsure
        unit.unsure = 0
        for i in range(n):
            got, _clean = self._send_ack([last], True, None, "re-ack", invalid_lease_ok=True)
            if not got or got[0].get("success") is not True:
                break
            if got[0].get("leaseReleased") is True:
                log.info(
                    "lease %s of queue %r released after %d re-ack(s) of %s (an earlier ack whose reply "
                    "was lost had not reached the broker)",
                    got[0].get("leaseId") or (unit.lease.lease_id if unit.lease else None),
                    self._st.queue,
                    i + 1,
                    ids([last]),
                )
                return
        log.warning(
            "the broker still holds the lease of partition %s of queue %r after the whole batch was acked "
            "(earlier acks lost their reply); the partition stays locked for this consumer group until "
            "the lease expires",
            last.get("partition") or last.get("partitionId"),
            self._st.queue,
        )

    def _send_ack(
        self,
        msgs: List[Message],
        status: Any,
        error: Optional[str],
        verb: str,
        covered_later: bool = False,
        invalid_lease_ok: bool = False,
    ) -> Tuple[Optional[List[Dict[str, Any]]], bool]:
        """Send one ack / batch ack, retrying connection errors with backoff (until the
        consumer is aborted). Returns ``(results, clean)``: the broker's per-item results
        (refused ones have ``success`` false, and are logged), or None when it could not be
        sent at all; ``clean`` is True when the broker accepted every item. A
        transient failure once the consumer is aborted (the stop gave up on the broker) gives
        ``{"success": False, "abandoned": True}`` per message: outcome unknown.

        ``covered_later``: a ``completed`` ack with later messages of the same partition and
        lease still to be acked; after a failure where the request may have reached the
        broker it is not resent (see the comment below) and its result is
        ``{"success": True, "uncertain": True}``.

        A copy resent after a lost reply that the broker refuses with ``Invalid or expired
        lease`` proves nothing: the first copy may have landed (and released the lease), or
        it never arrived and the lease expired meanwhile (the broker redelivers the message).
        An ack then gives ``{"success": True, "uncertain": True}`` (``ack_uncertain``), a
        nack ``{"success": False, "abandoned": True}`` (``uncertain``); a release counts as
        done either way (the message is free for redelivery): ``{"success": True, "landed":
        True, "leaseReleased": True}``. ``invalid_lease_ok`` reads that refusal as done on the
        first attempt (re-acks of :meth:`_complete_batch_count`, whose message was acked
        already)."""
        attempt = 0
        uncertain = False
        while True:
            t0 = time.monotonic()
            try:
                results, refused = self._broker.ack_popped(msgs, status, self._group, error)
            except ClientClosedError:
                log.warning("client closed before the %s of %d message(s) of queue %r: %s", verb, len(msgs), self._st.queue, ids(msgs))
                self._st.request_stop("closed")
                return None, False
            except Exception as exc:
                if transient(exc) and self._st.abort_evt.is_set():
                    # the stop gave up on the broker (unreachable, or the drain timeout passed
                    # in an outage): the outcome is unknown, say so (see ConsumeResult.uncertain)
                    log.warning(
                        "%s of %d message(s) of queue %r not confirmed: the consumer is stopping and the broker "
                        "cannot be reached (%s); %s: %s",
                        verb,
                        len(msgs),
                        self._st.queue,
                        exc,
                        "not released (the broker redelivers them after the lease)"
                        if status == "retry"
                        else "counted as uncertain (if it did not land, the broker redelivers after the lease)",
                        ids(msgs),
                    )
                    return [
                        {"transactionId": m.get("transactionId"), "success": False, "error": str(exc), "abandoned": True}
                        for m in msgs
                    ], False
                if not transient(exc):
                    log.warning(
                        "%s of %d message(s) of queue %r failed: %s (the broker redelivers them after the lease): %s",
                        verb,
                        len(msgs),
                        self._st.queue,
                        exc,
                        ids(msgs),
                    )
                    if isinstance(exc, AuthenticationError):
                        # as for a pop: no later ack can land either, and going on would run
                        # the handler again on every redelivery, acking nothing
                        log.error("%s refused (%s); stopping the consumer of queue %r", verb, exc, self._st.queue)
                        self._st.fail(exc)
                    return None, False
                if maybe_sent(exc):
                    if covered_later:
                        # The broker may have applied it: a second copy would be counted twice
                        # against the partition's batch and release its lease too early. The
                        # next ack of this partition moves the cursor past this message anyway,
                        # and after the last one the batch count is completed if it is short
                        # (see _complete_batch_count).
                        log.info(
                            "reply to the ack of %s lost (%s); not resending it: the later acks of its partition cover it",
                            ids(msgs),
                            exc,
                        )
                        self._st.outage.failure(verb, exc, t0)
                        return [{"transactionId": m.get("transactionId"), "success": True, "uncertain": True} for m in msgs], False
                    uncertain = True
                self._st.outage.failure(verb, exc, t0)
                self._st.abort_evt.wait(backoff(attempt))
                attempt += 1
                continue
            self._st.outage.success(t0)
            if not refused:
                return results, True
            failed = [r for r in results if r.get("success") is not True]
            return self._refused(msgs, status, verb, results, failed, uncertain, invalid_lease_ok), False

    def _refused(
        self,
        msgs: List[Message],
        status: Any,
        verb: str,
        results: List[Dict[str, Any]],
        failed: List[Dict[str, Any]],
        resent: bool,
        invalid_lease_ok: bool,
    ) -> List[Dict[str, Any]]:
        """The results of an ack the broker refused (some or all items): logged, and read
        after a resend as :meth:`_send_ack` says."""
        by_tx = {m.get("transactionId"): m for m in msgs}
        if resent or invalid_lease_ok:
            gone = {r.get("transactionId") for r in failed if r.get("error") == INVALID_LEASE}
            if gone:
                done = invalid_lease_ok or status == "retry"
                if done:
                    mark: Dict[str, Any] = {"success": True, "error": None, "landed": True, "leaseReleased": True}
                elif status is True:
                    mark = {"success": True, "uncertain": True}
                else:
                    mark = {"abandoned": True}
                results = [dict(r, **mark) if r.get("transactionId") in gone else r for r in results]
                failed = [r for r in failed if r.get("transactionId") not in gone]
                gone_msgs = ids([by_tx.get(t, {"transactionId": t}) for t in gone])
                if done:
                    log.info(
                        "%s of %d message(s) of queue %r refused with %r %s: counted as done (its lease is "
                        "no longer held): %s",
                        verb,
                        len(gone),
                        self._st.queue,
                        INVALID_LEASE,
                        "after an earlier attempt whose reply was lost" if resent else "",
                        gone_msgs,
                    )
                else:
                    log.warning(
                        "%s of %d message(s) of queue %r resent after a lost reply and refused with %r: the first "
                        "copy may have been applied, or the lease expired before it arrived (then the broker "
                        "redelivers them); counted as uncertain: %s",
                        verb,
                        len(gone),
                        self._st.queue,
                        INVALID_LEASE,
                        gone_msgs,
                    )
                if not failed:
                    return results
        refused_msgs = [by_tx.get(r.get("transactionId"), {"transactionId": r.get("transactionId")}) for r in failed]
        expired = status != "retry" and not resent and any(r.get("error") == INVALID_LEASE for r in failed)
        log.warning(
            "%s of %d of %d message(s) of queue %r%s refused by the broker (%s)%s: %s%s",
            verb,
            len(failed),
            len(msgs),
            self._st.queue,
            "" if self._group is None else " (consumer group %r)" % (self._group,),
            ", ".join(sorted({str(r.get("error")) for r in failed})),
            " after an earlier attempt whose reply was lost (it may have been applied)" if resent else "",
            ids(refused_msgs),
            self._expired_hint() if expired else "",
        )
        return results

    def _expired_hint(self) -> str:
        """What to do when an ack is refused because the lease expired while the handler ran."""
        if self._renews:
            return (
                "; the lease expired before the handler finished although renew_lease(True) is on: "
                "use a shorter renew_lease() interval or a longer leaseTime for the queue "
                "(the broker redelivers the message(s))"
            )
        where = "queen.queue(%r)%s" % (self._st.queue, "" if self._group is None else ".group(%r)" % (self._group,))
        return (
            "; the handler outlived the lease (the broker redelivers the message(s)): enable lease renewal "
            "with %s.renew_lease(True)...consume(handler), or give the queue a longer lease_time "
            "(config({'lease_time': seconds}) where the queue is created)" % (where,)
        )

    def release_units(self, units: List[Unit]) -> None:
        """Hand unhandled messages back to the broker (ack status ``retry``) and forget them.
        Only releases the broker confirmed count as ``released``; the others count as ack
        failures (the broker redelivers them once their lease expires)."""
        todo = []
        for unit in units:
            rest = unit.msgs[unit.pos:]
            unit.pos = len(unit.msgs)
            if rest:
                todo.append((unit, rest))
        if not todo:
            return
        send: List[Message] = []
        sent_units: List[Unit] = []
        with self._st.lock:
            for unit, rest in todo:
                lease = unit.lease
                if lease is None or not lease.lost:
                    send.extend(rest)
                    sent_units.append(unit)
                    if lease is not None:
                        lease.acks_in_flight += 1
        results: Optional[List[Dict[str, Any]]] = []
        refused_tx: Set[Any] = set()
        if send:
            try:
                results, _clean = self._send_ack(send, "retry", None, "release")
            finally:
                if results is not None:
                    refused_tx = {r.get("transactionId") for r in results if r.get("success") is not True}
                with self._st.lock:
                    for unit in sent_units:
                        if unit.lease is not None:
                            unit.lease.acks_in_flight -= 1
                            unit.lease.released.add(unit.pid)
                    self._st.stats.ack_failures += len(send) if results is None else len(refused_tx)
                    self._st.acks_settled_locked()
        for unit, rest in todo:
            if not any(unit is u for u in sent_units):
                self._st.resolve(rest, unit, handled=False, lost=True)
                continue
            if results is None:
                done, failed = [], rest
            else:
                done = [m for m in rest if m.get("transactionId") not in refused_tx]
                failed = [m for m in rest if m.get("transactionId") in refused_tx]
            if done:
                self._st.resolve(done, unit, released=True)
            if failed:
                self._st.resolve(failed, unit, released=True, confirmed=False)

