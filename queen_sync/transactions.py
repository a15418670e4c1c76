"""Transactions: :class:`TransactionBuilder`, an atomic bundle of pushes and acks
committed with one ``POST /api/v1/transaction``, and its ``queue(q)[.partition(p)]`` step
:class:`TransactionQueueBuilder`.

The commit body is built once; a commit whose outcome is unknown (lost reply) is retried
on the same builder with the same bytes, and a refused retry is read to tell whether the
earlier attempt landed (see :meth:`TransactionBuilder.commit`).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import codec
from ._session import Session
from ._validate import ack_context, int_arg, items_arg, refuse_duplicate_acks, refuse_unleased, resolve_group, validate_name
from .errors import (
    ClientClosedError,
    InvalidInputError,
    ProtocolError,
    QueenConnectionError,
    QueenHTTPError,
    TransactionError,
)
from .message import note_settled
from .wire import messages as wire_messages

__all__ = ["TransactionBuilder", "TransactionQueueBuilder"]

Message = Dict[str, Any]

# the logger these messages had before they moved here (users may have configured it)
log = logging.getLogger("queen_sync.builders")


class TransactionQueueBuilder:
    """The ``transaction().queue(q)[.partition(p)]`` step; :meth:`push` returns the transaction."""

    def __init__(self, tx: "TransactionBuilder", queue: str, partition: Optional[str] = None) -> None:
        self._tx = tx
        self._queue = validate_name("queue", queue)
        self._partition = partition

    def partition(self, name: str) -> "TransactionQueueBuilder":
        """Partition of the pushed items (default: the broker's ``Default``)."""
        return TransactionQueueBuilder(self._tx, self._queue, validate_name("partition", name))

    def push(self, items: Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]) -> "TransactionBuilder":
        """Add a push of one item or a list (same item rules as :meth:`QueueBuilder.push`;
        each item gets a client-minted ``transactionId``). Returns the transaction builder."""
        lst = items_arg(items, "transaction push()")
        self._tx._add(codec.build_tx_push_op(self._queue, self._partition, lst))
        return self._tx


class TransactionBuilder:
    """An atomic bundle of pushes and acks, made by :meth:`queen_sync.Queen.transaction`
    (the client; plain pushes and pops: :class:`~queen_sync.QueueBuilder`)::

        q.transaction().queue("invoices").partition("acme").push([{"data": inv}]) \\
            .ack(order, "completed", {"consumer_group": "billing"}).commit()

    The commit body is built once, at the first :meth:`commit`; after that no operation can
    be added, and a commit whose outcome is unknown (lost reply) may be retried on the same
    builder, which resends the same body (see :meth:`commit`).

    Not thread-safe; build and commit it in one thread.
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._ops: List[Dict[str, Any]] = []
        self._body: Optional[bytes] = None  # built once, at the first commit
        self._outcome: Optional[str] = None  # None (not sent / unknown), "committed", "rejected"
        self._uncertain = False  # an earlier attempt may have reached the broker
        self._acked: List[Tuple[Any, str]] = []  # (message, status) of the ack operations

    def __repr__(self) -> str:
        state = ""
        if self._outcome is not None:
            state = ", " + self._outcome
        elif self._uncertain:
            state = ", outcome unknown"
        return "TransactionBuilder(operations=%d%s)" % (len(self._ops), state)

    def _add(self, op: Dict[str, Any]) -> None:
        if self._outcome == "committed":
            raise InvalidInputError("this transaction was already committed")
        if self._body is not None:
            raise InvalidInputError(
                "this transaction was already sent: no operation can be added (retry commit() "
                "or build a new transaction)"
            )
        self._ops.append(op)

    @property
    def operations(self) -> List[Dict[str, Any]]:
        """A copy of the operations added so far (wire dicts)."""
        return [dict(op) for op in self._ops]

    def queue(self, name: str) -> TransactionQueueBuilder:
        """Start a push to queue ``name``."""
        return TransactionQueueBuilder(self, name)

    def ack(
        self,
        messages: Union[Message, Sequence[Message]],
        status: Union[bool, str] = "completed",
        context: Optional[Mapping[str, Any]] = None,
        *,
        group: Optional[str] = None,
        error: Optional[str] = None,
    ) -> "TransactionBuilder":
        """Add an ack of one message or a list.

        Args:
            messages: popped message dicts; each op carries the message's ``leaseId``, so
                the whole commit is rejected if the lease has expired.
            status: ``"completed"`` (or True / ``"success"``), ``"failed"`` / False or
                ``"dlq"`` (both go straight to the dead-letter queue inside a transaction).
                ``"retry"`` is refused (a 0.15 broker rejects it in transactions).
            context: ``{"consumer_group": g}`` or ``{"group": g}``; default: the message's
                own ``consumerGroup`` (queue mode for ``__QUEUE_MODE__``). ``{"error": text}``
                is the reason a ``failed`` / ``dlq`` ack records as the dead-letter row's
                ``errorMessage`` (without it the broker writes ``"Unknown error"``).
            group, error: the keyword forms of the context's keys, as :meth:`queen_sync.Queen.ack`
                takes them (the same value in both is fine, two different ones are not).

        Raises:
            InvalidInputError: a bad message (also one popped with ``auto_ack(True)``: it
                has no lease to fence the ack), status or context, or the transaction was
                already sent (nothing added). A message acked twice for one consumer group
                (in one call or two) is refused by :meth:`commit`, before sending.

        Wire: each message becomes ``{"type": "ack", transactionId, partitionId, status,
        consumerGroup?, leaseId?, error?}`` in the commit body.
        """
        st = codec.normalize_status(status)
        if st == "retry":
            raise InvalidInputError("status 'retry' is not accepted inside a transaction by a Queen 0.15 broker")
        group, error = ack_context(context, group, error)
        lst = items_arg(messages, "transaction ack()")
        if not lst:
            raise InvalidInputError("transaction ack() needs at least one message")
        for i, m in enumerate(lst):
            if isinstance(m, Mapping):
                refuse_unleased("transaction ack() item %d" % i, m)
        ops = [codec.build_tx_ack_op(m, st, resolve_group(m, group), error) for m in lst]
        for op in ops:
            self._add(op)
        self._acked.extend((m, op["status"]) for m, op in zip(lst, ops))
        return self

    def commit(self, retries: int = 0) -> Dict[str, Any]:
        """Send the transaction; the broker applies all operations or none.

        The body (with the client-minted ``transactionId`` of every pushed item) is built
        once, at the first call. The transport **never resends a transaction by itself**
        once it may have reached the broker: a lost reply (connection broken after sending,
        read timeout, a 500 / 502 / 504) raises, and the transaction may or may not have
        been applied. Then call ``commit()`` again **on the same builder** (never build a
        new transaction: its new push ids would duplicate the pushes if the first attempt
        had landed). The retry resends the same body; if the earlier attempt was applied,
        the broker refuses the retry (its push ids already exist) and rolls it back, so
        nothing is pushed or acked twice, and :class:`TransactionError` is raised with
        ``maybe_committed = True``: treat that as success. Recommended pattern::

            tx = q.transaction().queue("out").push([{"data": d}]).ack(msg, "completed")
            try:
                tx.commit(retries=5)           # or: catch QueenConnectionError, commit() again
            except TransactionError as exc:
                if not exc.maybe_committed:
                    raise                     # really rejected: nothing was applied
                # the lost earlier attempt was (most likely) committed: done

        ``maybe_committed`` is also set when, after a lost reply, the retry is refused
        because an ack's lease is gone ("Invalid or expired lease" / "Message not found")
        before any push could show the earlier attempt failed: either that attempt released
        the lease (committed), or it did not commit and the message is redelivered once its
        lease expires, so treating it as done loses nothing (at-least-once). Put the pushes
        before the acks (as in the example) to get the exact answer.

        By the same rule a transaction with **no push** (acks only, whatever their status) is
        never resent after an attempt that may have been applied (a lost reply, a 5xx other
        than 503, an unreadable 2xx): nothing would make the broker refuse the copy while the
        pop's lease is still held (a pop of several messages, not all acked yet), and it would
        apply the acks a second time: a ``failed`` / ``dlq`` ack dead-letters the message
        again, a ``completed`` one is counted again toward the pop's batch, so the lease is
        released before the pop's last message is acked (whose ack is then refused, and which
        is redelivered), and it sets the partition's cursor back to the message if a later
        one was acked in between. The retry (``commit()`` again, or the next attempt of
        ``commit(retries=N)``) sends nothing and raises :class:`TransactionError` with
        ``maybe_committed = True`` (``.result`` None; chained to the lost attempt's error
        under ``retries``). Add a push to such a transaction to have it resent safely.

        Args:
            retries: how many more times to send the same body after a failure whose
                outcome is unknown or that the broker did not process (:class:`QueenConnectionError`
                / :class:`QueenTimeoutError`, a 5xx or 429 reply), waiting the client's backoff
                between attempts (the client's ``retry_delay_millis`` / ``backoff``). Default 0:
                the error is raised at once and ``commit()`` may be called again. Each
                attempt also gets the transport's own retries of requests never sent.

        Returns:
            the broker dict ``{success: True, transactionId, results: [...]}``.

        Raises:
            InvalidInputError: no operations ("Transaction has no operations to commit"),
                a bad ``retries``, the transaction was already committed or rejected, or it
                acks one message twice (same ``transactionId`` and ``partitionId``, whatever
                its ``leaseId``) for one consumer group, as :meth:`queen_sync.Queen.ack` of a
                list refuses: the error names both places in :attr:`operations` (nothing sent).
            TransactionError: the broker rejected it (``.result`` is its reply). Nothing of
                this attempt was applied; ``.maybe_committed`` says an earlier attempt whose
                reply was lost most likely was (see above). Also raised, with
                ``maybe_committed`` and nothing sent, instead of resending a transaction
                without push (see above).
            QueenConnectionError / QueenTimeoutError: no reply (``.sent`` False: certainly
                not applied); the outcome is unknown: call ``commit()`` again.
            QueenHTTPError: a non-2xx reply; after a 5xx or 429 ``commit()`` may be called
                again, after another 4xx the transaction counts as rejected.
            ProtocolError: an unreadable 2xx reply (outcome unknown; ``commit()`` may be
                called again). ClientClosedError: the client is closed.

        Wire: ``POST /api/v1/transaction`` ``{"operations": [...]}``, the same bytes on
        every attempt.
        """
        retries = int_arg("retries", retries, 0)
        if self._outcome == "committed":
            raise InvalidInputError("this transaction was already committed")
        if self._outcome == "rejected":
            raise InvalidInputError("this transaction was rejected by the broker; build a new one")
        if self._body is None:
            refuse_duplicate_acks(
                ((i, op, op.get("consumerGroup")) for i, op in enumerate(self._ops) if op.get("type") == "ack"),
                "transaction operations",
                "one transaction settles a message once; build it again without the duplicate",
            )
            self._body = codec.encode_transaction(self._ops, nan_as_null=self._session.nan_as_null)
        refusal = self._resend_refusal()
        if refusal is not None:
            raise refusal
        failures = 0
        while True:
            try:
                return self._send()
            except (QueenConnectionError, QueenHTTPError) as exc:
                if failures >= retries or not _tx_retryable(exc):
                    raise
                refusal = self._resend_refusal()
                if refusal is not None:
                    raise refusal from exc
                delay = self._session.backoff.compute(failures)
                failures += 1
                log.warning(
                    "transaction commit failed (%s); resending the same transaction (retry %d of %d) in %.0f ms",
                    exc,
                    failures,
                    retries,
                    delay * 1000.0,
                )
                if self._session.pause(delay):
                    raise ClientClosedError("the Queen client was closed while retrying a transaction commit") from exc

    def _resend_refusal(self) -> Optional[TransactionError]:
        """The error that replaces a resend which could apply the transaction twice, or None.

        After an attempt that may have been applied, a transaction with no push (acks only)
        is not sent again: no duplicate push id would make the broker refuse the copy, and
        its acks are still accepted while the pop's lease is held (another message of the pop
        not acked yet), so the copy would apply them a second time: a ``failed`` / ``dlq``
        ack dead-letters the message again, a ``completed`` one counts again toward the pop's
        batch (the lease is released early: the pop's last ack is refused, its message
        redelivered) and may set the cursor back. It counts as committed then
        (``maybe_committed``, as a retry refused for a gone lease): if the lost attempt was
        not applied, the message is redelivered once its lease expires.
        """
        if not self._uncertain or not _resend_applies_twice(self._ops):
            return None
        self._outcome = "committed"
        self._note_acked()
        statuses = sorted({str(op.get("status")) for op in self._ops if op.get("type") == "ack"})
        harm = []
        if any(st in ("failed", "dlq") for st in statuses):
            harm.append("dead-letter the message again")
        if any(st not in ("failed", "dlq") for st in statuses):
            harm.append("count the completed ack twice toward its pop's batch (releasing the lease before the "
                        "pop's last message is acked)")
        text = (
            "transaction not resent: an earlier attempt may have been applied (its reply was lost) and it has no "
            "push to tell, so a second copy of its %s ack would %s; treat it as committed (if it was not, the "
            "message is redelivered when its lease expires)" % (" / ".join(statuses), " and ".join(harm))
        )
        log.info("%s", text)
        return TransactionError(text, maybe_committed=True)

    def _note_acked(self) -> None:
        """Mark the acked :class:`~queen_sync.Message` objects as settled: a consumer with
        auto-ack then does not ack a message its handler acked in this transaction."""
        for m, st in self._acked:
            note_settled(m, st)

    def _send(self) -> Dict[str, Any]:
        """One commit attempt with the built body; updates the builder's outcome."""
        assert self._body is not None
        had_uncertain = self._uncertain
        try:
            doc, status = wire_messages.transaction(self._session, self._body)
        except (QueenConnectionError, QueenHTTPError) as exc:
            if _tx_retryable(exc):
                if _tx_maybe_applied(exc):
                    self._uncertain = True
            else:
                self._outcome = "rejected"
            raise
        except ProtocolError:
            self._uncertain = True  # a 2xx reply we cannot read: it may have been applied
            raise
        if doc.get("success") is True:
            self._outcome = "committed"
            self._note_acked()
            return doc
        err = doc.get("error")
        verdict = _tx_retry_verdict(err, doc, self._ops) if had_uncertain else None
        if verdict is not None:
            self._outcome = "committed"
            self._note_acked()
            log.info("transaction retry refused by the broker (%s): %s", err, verdict)
            raise TransactionError(
                "transaction retry refused by the broker: %s; %s" % (err, verdict),
                result=doc,
                maybe_committed=True,
                status=status,
                error=err,
                body=doc,
            )
        self._outcome = "rejected"
        raise TransactionError(
            "transaction rejected by the broker (rolled back): %s" % (err,),
            result=doc,
            status=status,
            error=err,
            body=doc,
        )


def _tx_retryable(exc: Exception) -> bool:
    """A failed commit attempt after which the same body may be sent again."""
    if isinstance(exc, QueenConnectionError):
        return True
    if isinstance(exc, QueenHTTPError):
        return exc.status is not None and (exc.status >= 500 or exc.status == 429)
    return False


def _resend_applies_twice(ops: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a second copy of ``ops`` could be applied on top of the first: no push op
    (whose duplicate ids would get the copy refused) and an ack (any status: ``failed`` /
    ``dlq`` dead-letter again, ``completed`` counts again toward the pop's batch)."""
    if any(op.get("type") == "push" for op in ops):
        return False
    return any(op.get("type") == "ack" for op in ops)


def _tx_maybe_applied(exc: Exception) -> bool:
    """Whether a failed attempt may have been applied by the broker."""
    if isinstance(exc, QueenConnectionError):
        return exc.sent is not False
    if isinstance(exc, QueenHTTPError):
        return exc.status not in (429, 503)  # 429 / 503: refused, nothing processed
    return True


#: A 0.15 broker refuses a push whose transactionId exists with PostgreSQL's
#: 'duplicate key value violates unique constraint "messages_partition_transaction_unique"'.
_DUP_KEY = "duplicate key"
_LEASE_GONE = ("ACK operation failed: Invalid or expired lease", "ACK operation failed: Message not found")


def _tx_retry_verdict(err: Any, doc: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """Why a rejected retry means an earlier attempt was (probably) committed, or None."""
    if not isinstance(err, str):
        return None
    has_push = any(op.get("type") == "push" for op in ops)
    if has_push and _DUP_KEY in err and "transaction" in err:
        return (
            "its push transactionIds already exist, so the earlier attempt whose reply was lost was "
            "most likely committed (this retry was rolled back; nothing was applied twice)"
        )
    if err.startswith(_LEASE_GONE):
        results = doc.get("results")
        pushed = isinstance(results, list) and any(
            isinstance(r, dict) and r.get("type") == "push" and r.get("success") is True for r in results
        )
        if not pushed:  # a push accepted before the failing ack proves the earlier attempt did not land
            return (
                "the ack's lease is gone, so the earlier attempt whose reply was lost may have been "
                "committed (if it was not, the message is redelivered when its lease expires)"
            )
    return None
