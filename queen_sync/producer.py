"""Buffered, batching producer: ``q.queue("orders").partition("p").buffer(500, 100).push(item)``.

Each ``(queue, partition)`` gets one :class:`PushBuffer` with its own background thread
(started on the first buffered push), modelled on OpenTelemetry's batch processor:

- **Validated at push time.** Items are turned into wire items and JSON-encoded when
  :meth:`PushBuffer.add` is called (``codec.encode_push_fragment``), so a bad ``traceId``
  or a payload that is not JSON-serialisable raises :class:`InvalidInputError` in the
  pushing thread, and nothing is buffered. A batch body is just the buffered fragments
  joined (``codec.join_push_fragments``); it is built **once**, so every resend carries the
  same ``transactionId`` s and the broker answers ``duplicate`` for what it already stored.
- **Batching.** A batch is sent when ``message_count`` messages or ``max_bytes`` bytes of
  encoded items are buffered, ``time_millis`` after the oldest buffered message arrived,
  on :meth:`PushBuffer.flush` / :meth:`BufferManager.flush_all`, or on close. A batch holds
  at most ``message_count`` messages and about ``max_bytes`` bytes (one push call is never
  split: ``push(list)`` of up to ``message_count`` items travels in one batch).
- **Bounded, never lossy.** At most ``max_messages`` messages are held (waiting or in
  flight). When full, ``push`` blocks up to ``block_timeout_millis`` and then raises
  :class:`BufferFullError`; nothing is dropped silently. A batch that fails (after the
  transport's own retries) is resent, in order, with capped backoff, until it is
  delivered or the buffer is closed. Only *transient* failures are resent: no reply,
  connection errors, 5xx, 408 and 429 (after the transport's own retries). A batch the
  broker **permanently refuses** -- any other 4xx reply, e.g. 400 (bad request), 401 / 403,
  404, 413 (body too large) -- is never retried: its messages are counted in the stats'
  ``failed``, one ERROR line is logged per batch (queue, partition, message count, HTTP
  status, the broker's error text; never payloads), the batch is dropped and the rest of
  the buffer goes on; the next :meth:`PushBuffer.flush` / ``close`` reports those messages
  in its return value. Items the broker answers ``duplicate`` count as
  delivered, and so do items a broker answers ``buffered`` (accepted into that broker's
  file buffer in push maintenance mode; it stores them later, they are not resent); items
  it answers ``failed`` are resent with the batch (up to ``FAILED_ITEM_ROUNDS`` times),
  then logged at ERROR and counted in ``failed`` (and reported by the next flush / close
  like refused batches). A reply that does not hold one result per item is treated like a
  failed send: the whole batch is resent (same ids).
- **Receipts.** A buffered ``push`` returns ``status: "pending"`` per item: held in this
  client's buffer, not sent yet.
- **Close.** :meth:`BufferManager.close` stops new pushes (:class:`ClientClosedError`),
  flushes for at most the given timeout, and returns the number of messages it could not
  confirm (also logged at ERROR and kept in ``unsent_on_close``). When messages are left
  unsent, a :class:`RuntimeWarning` is also issued (``warnings.warn``), so the loss is
  visible on stderr even when logging is not configured.
- **Fork.** After a fork the child starts with no buffers and no threads (a fresh manager
  state and lock, via ``os.register_at_fork``, uWSGI's post-fork hook and a pid check on
  every entry; see :mod:`queen_sync._fork`); the parent keeps and sends its own messages,
  so nothing is sent twice. **uWSGI without** ``--lazy-apps``: in the master, which loads
  the app and then forks the workers without Python's fork hooks, no sender thread is
  started (one running Python code at the fork leaves the workers' GIL held: they hang);
  there a buffered push is sent synchronously, as an unbuffered push (broker results, not
  ``pending`` receipts). In the workers buffers work as usual. When uWSGI runs Python
  without threads (before 2.0.27, without ``--enable-threads``), one WARNING on the
  ``queen_sync`` logger and a ``RuntimeWarning`` say the sender will not run between requests.
- **Logging.** A batch that fails logs one WARNING on its first failed send, DEBUG for the
  next ones, INFO once delivered; at close, one ERROR sums up what was left unsent per
  buffer (failed sends, last error). Never a line per resend.
- **Exit.** An ``atexit`` hook flushes what is still buffered (bounded by the close
  timeout: with the broker unreachable, exit waits that long, 30 s by default); messages
  it cannot send are logged at ERROR and reported by a
  :class:`RuntimeWarning` ("queen_sync: N buffered message(s) could not be sent to <urls>
  before exit").

Logging goes to the ``queen_sync.producer`` logger.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import os
import sys
import threading
import time
import warnings
import weakref
from dataclasses import asdict, dataclass
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _fork, codec
from ._validate import int_arg
from .errors import (
    BufferFullError,
    ClientClosedError,
    InvalidInputError,
    QueenError,
    QueenHTTPError,
)
from .transport import Backoff, ExponentialBackoff, Transport
from .wire import messages as wire_messages

__all__ = ["BufferOptions", "PushBuffer", "BufferManager", "FAILED_ITEM_ROUNDS", "DEFAULT_CLOSE_TIMEOUT_MILLIS"]

log = logging.getLogger("queen_sync.producer")

#: How many times a batch is resent because the broker answered some items ``failed``.
FAILED_ITEM_ROUNDS = 3
#: Default bound of close()'s final flush, in milliseconds.
DEFAULT_CLOSE_TIMEOUT_MILLIS = 30000
#: 4xx statuses that are transient (resent); any other 4xx is a permanent refusal.
_TRANSIENT_4XX = (408, 429)
_MAX_LOGGED_ERROR = 300


def _is_permanent_refusal(exc: BaseException) -> bool:
    """True for a reply the broker will give again for the same body: a 4xx other than 408 / 429."""
    status = getattr(exc, "status", None)
    return (
        isinstance(exc, QueenHTTPError)
        and isinstance(status, int)
        and 400 <= status < 500
        and status not in _TRANSIENT_4XX
    )


@dataclass(frozen=True)
class BufferOptions:
    """Options of a push buffer (see :meth:`QueueBuilder.buffer`).

    Attributes:
        message_count: send a batch when this many messages are buffered; also the largest
            batch (default 100).
        time_millis: send a batch this many **milliseconds** after the oldest buffered
            message arrived (default 1000).
        max_bytes: send a batch when this many bytes of encoded items are buffered; also the
            (soft) largest batch body (default 1 MiB).
        max_messages: bound of the buffer: messages waiting or in flight (default
            ``max(10000, 10 * message_count)``; at least ``message_count``).
        block_timeout_millis: how long a push into a full buffer waits for room, in
            **milliseconds**, before raising :class:`BufferFullError` (default 10000; 0 = fail at once).

    Raises:
        InvalidInputError: a value that is not a positive int (``block_timeout_millis`` may be 0).
    """

    message_count: int = 100
    time_millis: int = 1000
    max_bytes: int = 1 << 20
    max_messages: Optional[int] = None
    block_timeout_millis: int = 10000

    def __post_init__(self) -> None:
        int_arg("message_count", self.message_count, 1)
        int_arg("time_millis", self.time_millis, 0)
        int_arg("max_bytes", self.max_bytes, 1)
        int_arg("block_timeout_millis", self.block_timeout_millis, 0)
        if self.max_messages is None:
            object.__setattr__(self, "max_messages", max(10000, 10 * self.message_count))
        else:
            int_arg("max_messages", self.max_messages, 1)
            if self.max_messages < self.message_count:
                raise InvalidInputError(
                    "max_messages (%d) must be >= message_count (%d)" % (self.max_messages, self.message_count)
                )


# --------------------------------------------------------------------------- one buffer


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
        with self._lock:
            if self._closed:
                raise ClientClosedError("the Queen client (push buffer of %s) is closed" % self._affinity)
            if self._waiting + self._in_flight + count > limit:
                wait_ms = self.options.block_timeout_millis if timeout_millis is None else timeout_millis
                deadline = time.monotonic() + wait_ms / 1000.0
                while self._waiting + self._in_flight + count > limit:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._s["full_timeouts"] += 1
                        raise BufferFullError(
                            "push buffer of %s is full (%d of %d messages unsent) after waiting %d ms; last error: %s"
                            % (self._affinity, self._waiting + self._in_flight, limit, wait_ms, self._s["last_error"])
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
        unsent, failed = self._close(deadline)
        return unsent + failed

    def _close(self, deadline: Optional[float]) -> Tuple[int, int]:
        """:meth:`close`; returns ``(unsent, failed not yet reported)``."""
        with self._lock:
            self._closed = True
            self._room.notify_all()  # blocked pushers raise ClientClosedError
            target = self._enqueued
            unsent = self._flush_wait_locked(target, deadline)
            self._stop.set()
            self._work.notify_all()
            return unsent, self._take_failed_locked()

    # ------------------------------------------------------------------ sender thread

    def _take_batch_locked(self) -> Tuple[List[bytes], int]:
        frags: List[bytes] = []
        count = 0
        size = 0
        max_count = self.options.message_count
        max_bytes = self.options.max_bytes
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
            try:
                # a reply without one result per item (ProtocolError): outcome unknown, resend (same ids)
                # budget=False: this loop is the long retry (and it stops on close)
                results, _status, _failed = wire_messages.push(
                    self._transport, body, queue=self.queue, partition=self.partition, count=count, budget=False
                )
            except ClientClosedError:
                return "stopped", failures
            except QueenError as exc:
                if _is_permanent_refusal(exc):
                    self._give_up_refused(count, exc)
                    return "refused", failures
                with self._lock:
                    self._s["retries"] += 1
                    self._s["last_error"] = str(exc)
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
                    self._s["last_error"] = repr(exc)
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
                    self._s["last_error"] = "; ".join(errors)
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
        """
        with self._lock:
            out = dict(self._s)
            out.update(
                queue=self.queue,
                partition=self.partition,
                unsent=self._waiting + self._in_flight,
                waiting=self._waiting,
                in_flight=self._in_flight,
                pushed=self._enqueued,
                oldest_age_millis=(time.monotonic() - self._frags[0][2]) * 1000.0 if self._frags else 0.0,
                closed=self._closed,
                options=asdict(self.options),
            )
        return out


_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _outside_stacklevel() -> int:
    """``stacklevel`` for a ``warnings.warn`` made by the caller of this function that points
    at the nearest frame outside the queen_sync package (e.g. the user's ``q.close()``), or
    at the outermost queen_sync frame when there is none (``atexit``, a close thread)."""
    f = sys._getframe(1)
    level = 1
    while f.f_back is not None and os.path.abspath(f.f_code.co_filename).startswith(_PKG_DIR):
        f = f.f_back
        level += 1
    return level


def _no_id() -> str:
    return "-"


def _deadline(timeout_millis: Optional[int]) -> Optional[float]:
    return None if timeout_millis is None else time.monotonic() + max(0, timeout_millis) / 1000.0


# --------------------------------------------------------------------------- all buffers of a client


_MANAGERS: "weakref.WeakSet[BufferManager]" = weakref.WeakSet()


def _reset_managers_after_fork() -> None:
    for m in list(_MANAGERS):
        try:
            m._reset_after_fork()
        except Exception:  # pragma: no cover - must never break a fork
            pass


def _close_managers_at_exit() -> None:
    for m in list(_MANAGERS):
        try:
            m.close(_at_exit=True)
        except Exception:  # pragma: no cover
            log.exception("error while flushing push buffers at exit")


# os.register_at_fork, and uWSGI's post-fork hook (it forks without Python's at-fork hooks)
_fork.after_fork_in_child(_reset_managers_after_fork)
atexit.register(_close_managers_at_exit)


class BufferManager:
    """All push buffers of one :class:`~queen_sync.Queen` client (``client._producer``).

    Args:
        transport: the client's transport (batches are sent with the push retry policy).
        close_timeout_millis: default bound of :meth:`close`, in milliseconds.
        backoff: delay policy between resends of a failed batch (default: exponential from
            100 ms to 5 s with jitter).
    """

    def __init__(
        self,
        transport: Transport,
        *,
        close_timeout_millis: int = DEFAULT_CLOSE_TIMEOUT_MILLIS,
        backoff: Optional[Backoff] = None,
        nan_as_null: bool = False,
    ) -> None:
        self._transport = transport
        self._nan_as_null = nan_as_null  # see Queen(nan_as_null=): checked when a message is buffered
        self._close_timeout_millis = close_timeout_millis
        self._backoff = backoff if backoff is not None else ExponentialBackoff(100, 5000)
        self._lock = threading.Lock()
        self._buffers: Dict[Tuple[str, Optional[str]], PushBuffer] = {}
        self._closed = False
        self._pid = os.getpid()
        #: Messages close() could not confirm (None before close()).
        self.unsent_on_close: Optional[int] = None
        _MANAGERS.add(self)

    def _reset_after_fork(self) -> None:
        """In a forked child: forget the parent's buffers (the parent sends them), with a new
        lock (the parent's may have been held by one of its threads at the fork)."""
        self._lock = threading.Lock()
        self._buffers = {}
        self._pid = os.getpid()

    def _check_fork(self) -> None:
        # the fallback when no post-fork hook ran (see queen_sync._fork)
        if self._pid != os.getpid():
            self._reset_after_fork()

    def background_allowed(self) -> bool:
        """False in a uWSGI process that forks workers without Python's fork hooks (the
        master loading the app without ``--lazy-apps``): no sender thread may run there, so
        a buffered push is sent synchronously, as an unbuffered one (``queen_sync._fork``)."""
        return not _fork.uwsgi_prefork()

    def buffer_for(self, queue: str, partition: Optional[str], options: BufferOptions) -> PushBuffer:
        """The buffer of ``(queue, partition)``, made with ``options`` on first use (later
        different options are ignored, with a warning)."""
        self._check_fork()
        key = (queue, partition)
        buf = self._buffers.get(key)
        if buf is None:
            with self._lock:
                if self._closed:
                    raise ClientClosedError("the Queen client is closed")
                buf = self._buffers.get(key)
                if buf is None:
                    buf = PushBuffer(self._transport, queue, partition, options, self._backoff)
                    self._buffers[key] = buf
        if buf.options != options:
            log.warning(
                "push buffer of %s/%s already exists with %s; ignoring %s", queue, partition or "Default", buf.options, options
            )
        return buf

    def push(
        self,
        queue: str,
        partition: Optional[str],
        items: Sequence[Mapping[str, Any]],
        options: BufferOptions,
    ) -> List[Dict[str, Any]]:
        """Validate, encode and buffer items (all or none).

        Returns:
            one ``{index, status: "pending", transaction_id, queueName}`` per item
            (``"pending"``: held in this client's buffer, not sent yet).

        Raises:
            InvalidInputError: a bad item or payload (nothing buffered), or more items than
                the buffer's ``max_messages``.
            BufferFullError: no room within ``block_timeout_millis``.
            ClientClosedError: the client is closed.
        """
        self._check_fork()
        if self._closed:
            raise ClientClosedError("the Queen client is closed")
        n = len(items)
        assert options.max_messages is not None  # BufferOptions.__post_init__ fills in the default
        if n > options.max_messages:
            raise InvalidInputError(
                "push of %d items exceeds the buffer bound max_messages=%d; push them unbuffered or raise the bound"
                % (n, options.max_messages)
            )
        step = options.message_count
        fragments: Sequence[Tuple[bytes, int]]
        if n <= step:  # the common case (e.g. a single item): one fragment
            frag, ids_all = codec.encode_push_fragment(queue, partition, items, nan_as_null=self._nan_as_null)
            fragments = ((frag, n),)
            nbytes = len(frag)
        else:
            # encoded in chunks below: check every item first so that an error names its
            # index in the whole list, not in its chunk (ids are not minted for this check)
            codec.build_push_items(queue, partition, items, _no_id)
            chunks: List[Tuple[bytes, int]] = []
            ids_all = []
            nbytes = 0
            for start in range(0, n, step):
                chunk = items[start : start + step]
                frag, ids = codec.encode_push_fragment(queue, partition, chunk, nan_as_null=self._nan_as_null)
                chunks.append((frag, len(chunk)))
                nbytes += len(frag)
                ids_all.extend(ids)
            fragments = chunks
        buf = self._buffers.get((queue, partition))
        if buf is None or buf.options is not options:  # a new buffer, or other options to compare
            buf = self.buffer_for(queue, partition, options)
        buf._add(fragments, n, nbytes)
        return [
            {"index": i, "status": "pending", "transaction_id": tx, "queueName": queue}
            for i, tx in enumerate(ids_all)
        ]

    def _snapshot(self) -> List[PushBuffer]:
        self._check_fork()
        with self._lock:
            return list(self._buffers.values())

    def flush(self, queue: str, partition: Optional[str], timeout_millis: Optional[int] = None) -> int:
        """Flush the buffer of ``(queue, partition)`` (see :meth:`PushBuffer.flush`); 0 when it has none."""
        self._check_fork()
        buf = self._buffers.get((queue, partition))
        return 0 if buf is None else buf.flush(timeout_millis)

    def flush_all(self, timeout_millis: Optional[int] = None) -> int:
        """Flush every buffer at once and wait (at most ``timeout_millis`` ms in total; None =
        until delivered or given up). Returns the number of messages not confirmed (0 = all
        delivered), counted as in :meth:`PushBuffer.flush`."""
        buffers = self._snapshot()
        targets = []
        for b in buffers:
            with b._lock:
                targets.append(b._request_flush_locked())
        deadline = _deadline(timeout_millis)
        left = 0
        for b, target in zip(buffers, targets):
            with b._lock:
                left += b._flush_wait_locked(target, deadline) + b._take_failed_locked()
        return left

    def close(self, timeout_millis: Optional[int] = None, *, _at_exit: bool = False) -> int:
        """Refuse new buffered pushes, flush every buffer for at most ``timeout_millis`` ms
        (default: the manager's close timeout), stop the senders. With the broker
        unreachable it waits the whole timeout (default 30000 ms), and so does the ``atexit``
        hook at interpreter exit; the messages are never dropped sooner.

        Returns:
            the number of messages that could not be confirmed: still unsent, or given up as
            failed (permanently refused) and not yet returned by a flush. Also logged at
            ERROR and stored in :attr:`unsent_on_close`; unsent messages are also reported by
            a :class:`RuntimeWarning` ("queen_sync: N buffered message(s) could not be sent
            to <urls> before close()" -- "before exit" from the ``atexit`` hook), visible on
            stderr without any logging setup. Idempotent: later calls return that number.
        """
        with self._lock:
            if self._closed:
                return self.unsent_on_close or 0
            self._closed = True
            buffers = list(self._buffers.values()) if self._pid == os.getpid() else []
        ms = self._close_timeout_millis if timeout_millis is None else timeout_millis
        deadline = _deadline(ms)
        for b in buffers:
            with b._lock:
                b._closed = True
                b._request_flush_locked()
        unsent = failed = 0
        stuck: List[str] = []  # per buffer left with unsent messages: its count, failed sends, last error
        for b in buffers:
            u, f = b._close(deadline)
            unsent += u
            failed += f
            if u:
                with b._lock:
                    stuck.append("%s: %d unsent, %d failed send(s) in all, last error: %s"
                                 % (b._affinity, u, b._s["retries"], b._s["last_error"]))
        self.unsent_on_close = unsent + failed
        if unsent:
            log.error(
                "closing the Queen client: %d buffered message(s) could not be delivered within %d ms (%s); "
                "with the broker unreachable, close() and the exit hook wait that long: "
                "Queen(close_timeout_millis=) or close(timeout_millis=) bound it",
                unsent, ms, "; ".join(stuck[:5]) + ("; ..." if len(stuck) > 5 else ""),
            )
            warnings.warn(
                "queen_sync: %d buffered message(s) could not be sent to %s before %s"
                % (unsent, ", ".join(self._transport.urls), "exit" if _at_exit else "close()"),
                RuntimeWarning,
                stacklevel=_outside_stacklevel(),
            )
        if failed:
            log.error(
                "closing the Queen client: %d buffered message(s) were refused by the broker (see earlier errors)",
                failed,
            )
        return unsent + failed

    def stats(self) -> Dict[str, Any]:
        """Statistics of every buffer.

        Returns:
            ``{"activeBuffers", "totalBufferedMessages" (unsent), "oldestBufferAge" (ms),
            "flushesPerformed" (batches sent), "delivered", "duplicates", "failed",
            "retries", "buffers": {"queue/partition": PushBuffer.stats()}}``.
        """
        per = {"%s/%s" % (b.queue, b.partition or "Default"): b.stats() for b in self._snapshot()}
        return {
            "activeBuffers": len(per),
            "totalBufferedMessages": sum(s["unsent"] for s in per.values()),
            "oldestBufferAge": max((s["oldest_age_millis"] for s in per.values()), default=0.0),
            "flushesPerformed": sum(s["batches"] for s in per.values()),
            "delivered": sum(s["delivered"] for s in per.values()),
            "duplicates": sum(s["duplicates"] for s in per.values()),
            "failed": sum(s["failed"] for s in per.values()),
            "retries": sum(s["retries"] for s in per.values()),
            "buffers": per,
        }
