"""One push buffer, :class:`PushBuffer`: the FIFO of encoded push fragments of one
``(queue, partition)``, its bound (pushers block, then :class:`BufferFullError`), its batch
triggers, and its background sender thread, which sends each batch (one body, built once)
until it is delivered, permanently refused, or the buffer is closed; plus its counters.

The rules it keeps are listed in :mod:`queen_sync.producer`. Logging goes to the
``queen_sync.producer`` logger.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import sysconfig
import threading
import time
from dataclasses import asdict
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from .. import _fork, codec
from ..errors import BufferFullError, ClientClosedError, QueenError, QueenHTTPError
from ..transport import Backoff, Transport
from ..wire import messages as wire_messages
from ._options import BufferOptions

__all__ = ["PushBuffer", "FAILED_ITEM_ROUNDS"]

log = logging.getLogger("queen_sync.producer")

#: How many times a batch is resent because the broker answered some items ``failed``.
FAILED_ITEM_ROUNDS = 3
#: 4xx statuses that are transient (resent); any other 4xx is a permanent refusal.
_TRANSIENT_4XX = (408, 429)
_MAX_LOGGED_ERROR = 300


def _one_line(text: str) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``_MAX_LOGGED_ERROR`` characters:
    an error text in a :class:`BufferFullError` (a 5xx page may span many lines)."""
    text = " ".join(text.split())
    return text if len(text) <= _MAX_LOGGED_ERROR else text[:_MAX_LOGGED_ERROR] + "..."


def _is_permanent_refusal(exc: BaseException) -> bool:
    """True for a reply the broker will give again for the same body: a 4xx other than 408 / 429."""
    status = getattr(exc, "status", None)
    return (
        isinstance(exc, QueenHTTPError)
        and isinstance(status, int)
        and 400 <= status < 500
        and status not in _TRANSIENT_4XX
    )


_NO_GIL = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
_yield = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))


def _take(lock: Any) -> None:
    """Acquire ``lock`` (a buffer's lock, on the pushers' path) without ever blocking on it
    in the OS: try it, and while it is held hand the GIL over (``sched_yield``) and try again.

    Why: a thread blocked on a ``threading.Lock`` is woken by its release and takes it
    without the GIL; the next pusher, holding the GIL, then finds it taken and blocks, and
    so on: with several threads pushing into one buffer every push became a GIL hand-off
    (measured at 8 threads: ~0.5 context switches and 6 us per add, from 1 us at 1 thread).
    Taken only with the GIL held, the lock is never found taken by a running pusher except
    when its holder was preempted inside the (short, lock-only) critical section. A
    free-threaded build blocks as usual.
    """
    if _NO_GIL:
        lock.acquire()
        return
    while not lock.acquire(False):
        _yield()


def _deadline(timeout_millis: Optional[int]) -> Optional[float]:
    return None if timeout_millis is None else time.monotonic() + max(0, timeout_millis) / 1000.0


class PushBuffer:
    """The buffer of one ``(queue, partition)``: a FIFO of encoded push fragments and one
    background sender thread. Made by :class:`BufferManager`; thread-safe."""

    def __init__(
        self,
        transport: Transport,
        queue: str,
        partition: Optional[str],
        options: BufferOptions,
        backoff: Backoff,
    ) -> None:
        self._transport = transport
        self.queue = queue
        self.partition = partition
        self.options = options
        self._backoff = backoff
        self._affinity = "%s/%s" % (queue, partition or "Default")
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the sender waits for work
        self._room = threading.Condition(self._lock)  # pushers wait for room / delivery
        self._stop = threading.Event()  # set when close() gives up: the sender stops retrying
        # FIFO of (fragment, message count, enqueue time (monotonic s))
        self._frags: Deque[Tuple[bytes, int, float]] = collections.deque()
        self._waiting = 0  # messages in _frags
        self._waiting_bytes = 0
        self._in_flight = 0  # messages of the batch being sent
        # enqueue time (monotonic s) of the oldest message of the batch taken for sending, until
        # it is delivered or given up (kept when the sender stops: the batch stays unsent)
        self._batch_oldest: Optional[float] = None
        self._batch_started = 0.0  # when the batch in flight was taken (monotonic s)
        self._batch_failures = 0  # failed sends of the batch in flight (and failed-item rounds)
        self._batch_error: Optional[str] = None  # the last of those failures' errors
        # the send in progress: the transport's failed attempts so far (it retries them itself,
        # retry_attempts in all, before the send fails), told by its on_retry; the latest error
        self._attempt_failures = 0
        self._attempt_error: Optional[str] = None
        self._enqueued = 0  # messages ever accepted (sequence)
        self._taken = 0  # messages ever taken into a batch
        self._done = 0  # messages ever delivered (queued / duplicate / buffered) or given up as failed
        self._flush_upto = 0  # send regardless of thresholds until _taken reaches this
        self._failed_unreported = 0  # messages given up as failed, not yet returned by a flush / close
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self._s: Dict[str, Any] = {
            "delivered": 0,
            "duplicates": 0,
            "failed": 0,
            "batches": 0,
            "retries": 0,
            "full_timeouts": 0,
            "last_error": None,
        }

    def __repr__(self) -> str:
        return "PushBuffer(queue=%r, partition=%r, unsent=%d)" % (self.queue, self.partition, self.unsent)

    # ------------------------------------------------------------------ producer side

    @property
    def unsent(self) -> int:
        """Messages accepted and not yet confirmed by the broker (waiting or in flight)."""
        return self._waiting + self._in_flight

    def add(self, fragments: Sequence[Tuple[bytes, int]], timeout_millis: Optional[int] = None) -> None:
        """Append already-encoded fragments (all or none), blocking while the buffer is full.

        Args:
            fragments: ``(fragment bytes, message count)`` pairs from ``codec.encode_push_fragment``.
            timeout_millis: how long to wait for room, in milliseconds (default: the
                buffer's ``block_timeout_millis``).

        Raises:
            BufferFullError: no room within the timeout (nothing of this call was buffered).
            ClientClosedError: the buffer (client) is closed.
        """
        self._add(fragments, sum(c for _, c in fragments), sum(len(f) for f, _ in fragments), timeout_millis)

    def _add(
        self, fragments: Sequence[Tuple[bytes, int]], count: int, nbytes: int, timeout_millis: Optional[int] = None
    ) -> None:
        """:meth:`add`, with the fragments' message ``count`` and ``nbytes`` already summed."""
        limit = self.options.max_messages
        assert limit is not None  # BufferOptions.__post_init__ fills in the default
        lock = self._lock
        _take(lock)
        try:
            if self._closed:
                raise ClientClosedError("the Queen client (push buffer of %s) is closed" % self._affinity)
            if self._waiting + self._in_flight + count > limit:
                wait_ms = self.options.block_timeout_millis if timeout_millis is None else timeout_millis
                deadline = time.monotonic() + wait_ms / 1000.0
                while self._waiting + self._in_flight + count > limit:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._s["full_timeouts"] += 1
                        why = self._full_reason_locked()
                        raise BufferFullError(
                            "push buffer of %s is full (%d of %d messages unsent) after waiting %d ms; %s"
                            % (self._affinity, self._waiting + self._in_flight, limit, wait_ms, why)
                        )
                    self._room.wait(left)
                    if self._closed:
                        raise ClientClosedError("the Queen client (push buffer of %s) is closed" % self._affinity)
            now = time.monotonic()
            was_empty = not self._frags
            for frag, c in fragments:
                self._frags.append((frag, c, now))
            before, before_bytes = self._waiting, self._waiting_bytes
            self._waiting = waiting = before + count
            self._waiting_bytes = waiting_bytes = before_bytes + nbytes
            self._enqueued += count
            if self._thread is None:
                self._start_thread()
            # Wake the sender only when this add changes what it waits for: the first message
            # (it starts the time trigger) or a size trigger newly reached. Past a trigger it
            # was woken already and sends without waiting (see _run); a wake-up per push would
            # cost a GIL hand-off per push.
            mc, mb = self.options.message_count, self.options.max_bytes
            if was_empty or (before < mc <= waiting) or (before_bytes < mb <= waiting_bytes):
                self._work.notify()
        finally:
            lock.release()

    def _full_reason_locked(self) -> str:
        """Why nothing got out, for :class:`BufferFullError` and the close summary: one line,
        no payloads. The batch in flight is named with how long its send has lasted, what
        this batch's failures were (not an older batch's error: that one may have been
        delivered since) and, while the transport is retrying the current send, its failed
        attempts and their latest error (e.g. connection refused: the buffer counts a failed
        send only once the transport's ``retry_attempts`` are used up)."""
        if self._in_flight:
            why = "a send of %d message(s) in flight for %.0f ms" % (
                self._in_flight, (time.monotonic() - self._batch_started) * 1000.0)
            retrying = None
            if self._attempt_error is not None:
                retrying = "the transport is retrying %s (%d failed attempt(s), latest error: %s)" % (
                    "the current send" if self._batch_error is not None else "it",
                    self._attempt_failures, _one_line(self._attempt_error))
            if self._batch_error is not None:
                why = "%s, resent after %d failed send(s), last error: %s" % (
                    why, self._batch_failures, _one_line(self._batch_error))
                return why if retrying is None else "%s; %s" % (why, retrying)
            if retrying is not None:
                return "%s, no reply yet: %s" % (why, retrying)
            # e.g. a broker that accepted the connection but does not answer
            return ("%s, no reply yet (a slow or unreachable broker: the transport makes up to retry_attempts "
                    "attempts, then the buffer resends the batch until delivered or closed)" % why)
        if self._s["last_error"] is not None:
            return "no send in flight, last error of an earlier send: %s" % _one_line(self._s["last_error"])
        return "no send in flight"

    def _note_attempt_failed(self, error: Exception, attempt: int) -> None:
        """The transport's ``on_retry`` for this buffer's sends: an attempt of the send in
        progress failed and is retried (``attempt``: its number)."""
        with self._lock:
            self._attempt_failures = attempt
            self._attempt_error = str(error)

    def _start_thread(self) -> None:
        _fork.warn_uwsgi_threads_off("the push buffer's background sender")
        t = threading.Thread(target=self._run, name="queen-buffer-%s" % self._affinity, daemon=True)
        self._thread = t
        t.start()

    def flush(self, timeout_millis: Optional[int] = None) -> int:
        """Send everything buffered now and wait until the broker confirmed it.

        Args:
            timeout_millis: how long to wait, in milliseconds (None = until delivered or
                given up: a permanently refused batch ends the wait for its messages).

        Returns:
            the number of messages not confirmed (0 = all delivered): those still unsent
            when the wait ended, plus those given up as ``failed`` (a batch permanently
            refused, items the broker kept failing) since the previous flush / close
            returned them (each is returned once).
        """
        with self._lock:
            target = self._enqueued
            return self._flush_wait_locked(target, _deadline(timeout_millis)) + self._take_failed_locked()

    def _take_failed_locked(self) -> int:
        n = self._failed_unreported
        self._failed_unreported = 0
        return n

    def _request_flush_locked(self) -> int:
        target = self._enqueued
        if target > self._flush_upto:
            self._flush_upto = target
            self._work.notify()
        return target

    def _flush_wait_locked(self, target: int, deadline: Optional[float]) -> int:
        self._request_flush_locked()
        while self._done < target:
            if self._thread is None or not self._thread.is_alive() or self._stop.is_set():
                break
            if deadline is None:
                self._room.wait()
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._room.wait(left)
        return max(0, target - self._done)

    def close(self, deadline: Optional[float]) -> int:
        """Refuse new pushes, flush until ``deadline`` (a ``time.monotonic()`` value, None =
        no limit), then stop the sender. Returns the number of unconfirmed messages (unsent,
        plus given up as failed and not yet returned by a flush)."""
        unsent, failed, _why = self._close(deadline)
        return unsent + failed

    def _close(self, deadline: Optional[float]) -> Tuple[int, int, str]:
        """:meth:`close`; returns ``(unsent, failed not yet reported, why)``: ``why`` says
        what kept the unsent ones (:meth:`_full_reason_locked`, read before the sender is
        stopped: the send in flight and its errors), ``""`` when none is unsent."""
        with self._lock:
            self._closed = True
            self._room.notify_all()  # blocked pushers raise ClientClosedError
            target = self._enqueued
            unsent = self._flush_wait_locked(target, deadline)
            why = self._full_reason_locked() if unsent else ""
            self._stop.set()
            self._work.notify_all()
            return unsent, self._take_failed_locked(), why

    # ------------------------------------------------------------------ sender thread

    def _take_batch_locked(self) -> Tuple[List[bytes], int]:
        frags: List[bytes] = []
        count = 0
        size = 0
        max_count = self.options.message_count
        max_bytes = self.options.max_bytes
        oldest = self._frags[0][2] if self._frags else None  # FIFO: the batch's first is its oldest
        while self._frags:
            frag, c, _ = self._frags[0]
            if frags and (count + c > max_count or size + len(frag) > max_bytes):
                break
            self._frags.popleft()
            frags.append(frag)
            count += c
            size += len(frag)
        self._waiting -= count
        self._waiting_bytes -= size
        self._in_flight = count
        self._taken += count
        self._batch_oldest = oldest
        self._batch_started = time.monotonic()
        self._batch_failures = 0
        self._batch_error = None
        self._attempt_failures = 0
        self._attempt_error = None
        return frags, count

    def _due_locked(self, now: float) -> Optional[float]:
        """None when a batch is due now, else seconds until the time trigger."""
        if (
            self._waiting >= self.options.message_count
            or self._waiting_bytes >= self.options.max_bytes
            or self._taken < self._flush_upto
            or self._closed
        ):
            return None
        left = self._frags[0][2] + self.options.time_millis / 1000.0 - now
        return None if left <= 0 else left

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            with self._lock:
                while True:
                    if self._thread is not me or self._stop.is_set():
                        return
                    if not self._frags:
                        if self._closed:
                            return
                        self._work.wait()
                        continue
                    left = self._due_locked(time.monotonic())
                    if left is None:
                        break
                    self._work.wait(left)
                frags, count = self._take_batch_locked()
            delivered = self._send(frags, count)
            with self._lock:
                self._in_flight = 0
                if delivered:
                    self._done += count
                    self._batch_oldest = None
                else:  # stopped: the batch stays counted as unsent
                    self._waiting += count
                    self._stop.set()
                self._room.notify_all()
                if not delivered:
                    return

    def _send(self, frags: List[bytes], count: int) -> bool:
        """Send one batch until done (True: delivered, or given up as failed after a
        permanent refusal) or the buffer is stopped (False)."""
        body = codec.join_push_fragments(frags)  # built once: resends reuse the transactionIds
        started = time.monotonic()
        outcome, failures = self._send_body(body, count)
        if failures and outcome == "delivered":
            log.info("push batch of %d message(s) to %s delivered after %d failed send(s) over %.1f s",
                     count, self._affinity, failures, time.monotonic() - started)
        return outcome != "stopped"

    def _send_body(self, body: bytes, count: int) -> Tuple[str, int]:
        """The resend loop of :meth:`_send`: ``(outcome, failed sends)``, outcome
        ``"delivered"``, ``"refused"`` (permanently: given up as failed) or ``"stopped"``.
        Rate-limited log (an outage would otherwise log a WARNING per resend, about one a
        second, the close timeout included): a WARNING on the batch's first failed send,
        DEBUG for the next ones; a batch given up at close is summed up by
        :meth:`BufferManager.close`."""
        failures = 0
        item_rounds = 0
        statuses: Dict[int, str] = {}
        while True:
            if self._stop.is_set():
                return "stopped", failures
            if self._attempt_error is not None:
                with self._lock:  # a new send: its own attempts
                    self._attempt_failures = 0
                    self._attempt_error = None
            try:
                # a reply without one result per item (ProtocolError): outcome unknown, resend (same ids)
                # budget=False: this loop is the long retry (and it stops on close)
                results, _status, _failed = wire_messages.push(
                    self._transport, body, queue=self.queue, partition=self.partition, count=count, budget=False,
                    on_retry=self._note_attempt_failed,
                )
            except ClientClosedError:
                return "stopped", failures
            except QueenError as exc:
                if _is_permanent_refusal(exc):
                    self._give_up_refused(count, exc)
                    return "refused", failures
                with self._lock:
                    self._s["retries"] += 1
                    self._s["last_error"] = self._batch_error = str(exc)
                    self._batch_failures += 1
                delay = self._backoff.compute(failures)
                failures += 1
                if failures == 1:
                    log.warning("push batch of %d message(s) to %s failed (%s); resending it with backoff until "
                                "delivered or the client is closed (next failures logged at DEBUG)",
                                count, self._affinity, exc)
                else:
                    log.debug("push batch of %d message(s) to %s failed again (%d failed sends: %s); resending "
                              "in %.0f ms", count, self._affinity, failures, exc, delay * 1000.0)
                if self._stop.wait(delay):
                    return "stopped", failures
                continue
            except Exception as exc:  # a bug must not kill the sender silently
                log.exception("unexpected error while sending a push batch to %s", self._affinity)
                with self._lock:
                    self._s["retries"] += 1
                    self._s["last_error"] = self._batch_error = repr(exc)
                    self._batch_failures += 1
                if self._stop.wait(self._backoff.compute(failures)):
                    return "stopped", failures
                failures += 1
                continue
            # queued / duplicate / buffered (a broker's file buffer, stored later) = delivered
            if not statuses:  # first reply: all delivered is the common case, told in C-level passes
                sts = list(map(dict.get, results, itertools.repeat("status")))
                dup = sts.count("duplicate")
                if sts.count("queued") + dup + sts.count("buffered") == count:
                    self._count_delivered(count, dup)
                    return "delivered", failures
            for i, r in enumerate(results):
                st = r.get("status")
                if statuses.get(i) in (None, "failed"):
                    statuses[i] = st if isinstance(st, str) else "failed"
            failed = [i for i in range(count) if statuses.get(i, "failed") == "failed"]
            if failed and item_rounds < FAILED_ITEM_ROUNDS and not self._stop.is_set():
                item_rounds += 1
                errors = sorted({str(results[i].get("error")) for i in failed if i < len(results)})
                with self._lock:
                    self._s["last_error"] = self._batch_error = "; ".join(errors)
                    self._batch_failures += 1
                log.warning(
                    "%d of %d pushed items to %s failed (%s); resending the batch",
                    len(failed),
                    count,
                    self._affinity,
                    ", ".join(errors),
                )
                if self._stop.wait(self._backoff.compute(item_rounds - 1)):
                    return "stopped", failures
                continue
            dup = sum(1 for s in statuses.values() if s == "duplicate")
            self._count_delivered(count - len(failed), dup, len(failed))
            if failed:
                log.error(
                    "%d of %d pushed items to %s were refused by the broker %d times and are not delivered",
                    len(failed),
                    count,
                    self._affinity,
                    item_rounds + 1,
                )
            return "delivered", failures

    def _count_delivered(self, delivered: int, duplicates: int, failed: int = 0) -> None:
        """Count one batch sent for good: ``delivered`` messages (``duplicates`` of them
        answered ``duplicate``), ``failed`` given up."""
        with self._lock:
            s = self._s
            s["batches"] += 1
            s["delivered"] += delivered
            s["duplicates"] += duplicates
            s["failed"] += failed
            self._failed_unreported += failed

    def _give_up_refused(self, count: int, exc: QueenError) -> None:
        """A batch the broker permanently refused (4xx but 408 / 429): count its messages
        as failed and log it once at ERROR (no payloads); the batch is not resent."""
        status = getattr(exc, "status", None)
        text = getattr(exc, "error", None) or str(exc)
        if len(text) > _MAX_LOGGED_ERROR:
            text = text[:_MAX_LOGGED_ERROR] + "..."
        with self._lock:
            self._s["failed"] += count
            self._s["last_error"] = str(exc)
            self._failed_unreported += count
        log.error(
            "push batch of %d message(s) to queue %r partition %r permanently refused by the broker "
            "(HTTP %s: %s); not retried, counted as failed",
            count,
            self.queue,
            self.partition or "Default",
            status,
            text,
        )

    # ------------------------------------------------------------------ stats

    def stats(self) -> Dict[str, Any]:
        """Counters of this buffer.

        Returns:
            ``{queue, partition, unsent (waiting + in flight), waiting, in_flight, pushed,
            delivered (queued + duplicate + broker-buffered), duplicates, failed (messages given up:
            in permanently refused batches, or items the broker kept failing),
            batches, retries (failed batch sends), full_timeouts (BufferFullError raised),
            last_error (str or None), oldest_age_millis, closed, options}``.
            ``oldest_age_millis``: how long, in **milliseconds**, the oldest message not yet
            delivered has been in the buffer (since its push), whether it is waiting or in a
            batch in flight (being sent or resent, e.g. during an outage); 0.0 when nothing is
            unsent. Messages delivered or given up as ``failed`` no longer count.
        """
        with self._lock:
            now = time.monotonic()
            # the batch taken for sending holds older messages than any still waiting (FIFO)
            oldest = self._batch_oldest if self._batch_oldest is not None else (
                self._frags[0][2] if self._frags else None)
            out = dict(self._s)
            out.update(
                queue=self.queue,
                partition=self.partition,
                unsent=self._waiting + self._in_flight,
                waiting=self._waiting,
                in_flight=self._in_flight,
                pushed=self._enqueued,
                oldest_age_millis=0.0 if oldest is None else (now - oldest) * 1000.0,
                closed=self._closed,
                options=asdict(self.options),
            )
        return out
