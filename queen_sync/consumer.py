"""The blocking consume loop behind :meth:`QueueBuilder.consume`.

:class:`Consumer` runs ``concurrency`` workers (the calling thread when it is 1, else one
thread each). Every worker repeats: reserve a share of the ``limit`` → long-poll pop →
call the handler → ack / nack. It stops on ``limit`` (a counter shared by all workers that
never overshoots: a worker only pops as many messages as the limit has left), on
``idle_millis`` without a message (shared across workers; long polls never wait longer than
the idle time left), on a ``stop_event``, when the client is closed, or on an error.

Logging goes to the ``queen_sync.consumer`` logger (refused acks, transient pop failures).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from .builders import PopSpec, execute_pop
from .errors import AckError, ClientClosedError, QueenConnectionError, QueenError

if TYPE_CHECKING:  # pragma: no cover
    from .builders import QueueBuilder
    from .client import Queen

__all__ = ["Consumer", "ConsumeResult"]

log = logging.getLogger("queen_sync.consumer")

_MAX_ERROR_TEXT = 1000
_NO_WAIT_PAUSE_S = 0.1
_CONNECTION_PAUSE_S = 1.0
_SLICE_S = 0.1

Message = Dict[str, Any]


@dataclass
class ConsumeResult:
    """What a consume() call did.

    Attributes:
        handled: messages delivered to the handler (failures included).
        failed: messages whose handler call raised.
        acked: messages the consumer acked ``completed`` (auto-ack only).
        nacked: messages the consumer nacked ``failed`` (auto-ack only).
        ack_failures: acks / nacks the broker refused or that could not be sent (logged).
        skipped: messages not delivered because an earlier message of the same partition in
            the same pop was nacked (the broker redelivers them).
        reason: why it stopped: ``"limit"``, ``"idle"``, ``"stopped"`` (stop_event),
            ``"closed"`` (client closed) or ``"error"``.
    """

    handled: int = 0
    failed: int = 0
    acked: int = 0
    nacked: int = 0
    ack_failures: int = 0
    skipped: int = 0
    reason: str = ""


class Consumer:
    """A consume loop over one queue builder's settings; see :meth:`QueueBuilder.consume`.

    Args:
        client: the :class:`~queen_sync.Queen` client.
        builder: the :class:`~queen_sync.builders.QueueBuilder` with the pop / consume settings.
        handler: called with one message dict (``each()`` or ``batch == 1``) or a list.
        stop_event: optional ``threading.Event``; setting it stops the consumer after the
            messages in hand are handled.
    """

    def __init__(
        self,
        client: "Queen",
        builder: "QueueBuilder",
        handler: Callable[[Any], Any],
        *,
        stop_event: Optional[threading.Event] = None,
    ) -> None:
        if not callable(handler):
            from .errors import InvalidInputError

            raise InvalidInputError("consume() needs a callable handler, got %r" % (handler,))
        self._client = client
        self._handler = handler
        self._spec: PopSpec = builder.pop_spec(for_consume=True)
        self._each: bool = builder._each or self._spec.batch == 1
        self._single_when_one = self._spec.batch == 1
        self._auto_ack: bool = True if builder._auto_ack is None else builder._auto_ack
        self._limit: Optional[int] = builder._limit
        self._idle_s: Optional[float] = None if builder._idle is None else builder._idle / 1000.0
        self._concurrency: int = builder._concurrency
        self._user_stop = stop_event
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._reserved = 0
        self._last_activity = time.monotonic()
        self._error: Optional[BaseException] = None
        self._result = ConsumeResult()

    # ------------------------------------------------------------------ control

    def stop(self, reason: str = "stopped") -> None:
        """Ask every worker to stop after the messages in hand."""
        with self._lock:
            if not self._result.reason:
                self._result.reason = reason
            self._stop.set()
            self._lock.notify_all()

    def _stopping(self) -> bool:
        if self._stop.is_set():
            return True
        if self._user_stop is not None and self._user_stop.is_set():
            self.stop("stopped")
            return True
        return False

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = exc
        self.stop("error")

    def _pause(self, seconds: float) -> None:
        """Wait up to ``seconds``, returning early on stop (also the user's stop_event)."""
        deadline = time.monotonic() + seconds
        while not self._stopping():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._stop.wait(min(left, _SLICE_S))

    def _idle_left(self) -> Optional[float]:
        if self._idle_s is None:
            return None
        with self._lock:
            return self._idle_s - (time.monotonic() - self._last_activity)

    def _touch(self) -> None:
        with self._lock:
            self._last_activity = time.monotonic()

    # ------------------------------------------------------------------ limit budget

    def _reserve(self) -> int:
        """Take up to ``batch`` messages of the limit's budget; 0 means stop."""
        batch = self._spec.batch
        with self._lock:
            while True:
                if self._stopping():
                    return 0
                if self._limit is None:
                    return batch
                left = self._limit - self._reserved
                if left > 0:
                    n = min(batch, left)
                    self._reserved += n
                    return n
                if self._result.handled >= self._limit:
                    self.stop("limit")
                    return 0
                # Other workers hold the rest of the budget; wait until they give some back.
                self._lock.wait(_SLICE_S)
                idle = self._idle_left_locked()
                if idle is not None and idle <= 0:
                    self.stop("idle")
                    return 0

    def _idle_left_locked(self) -> Optional[float]:
        if self._idle_s is None:
            return None
        return self._idle_s - (time.monotonic() - self._last_activity)

    def _release(self, n: int) -> None:
        if n <= 0 or self._limit is None:
            return
        with self._lock:
            self._reserved -= n
            self._lock.notify_all()

    def _count_handled(self) -> None:
        with self._lock:
            self._result.handled += 1
            self._last_activity = time.monotonic()

    def _check_limit(self) -> None:
        if self._limit is not None:
            with self._lock:
                if self._result.handled >= self._limit:
                    self.stop("limit")

    # ------------------------------------------------------------------ run

    def run(self) -> ConsumeResult:
        """Run until a stop condition; return the :class:`ConsumeResult`.

        Raises:
            the handler's exception (``auto_ack(False)``), or a pop error that is not a
            transient connection problem (e.g. AuthenticationError, BrokerError).
        """
        if self._concurrency == 1:
            self._worker()
        else:
            threads = [
                threading.Thread(
                    target=self._worker,
                    name="queen-consume-%s-%d" % (self._spec.queue, i),
                    daemon=True,
                )
                for i in range(self._concurrency)
            ]
            for t in threads:
                t.start()
            try:
                for t in threads:
                    while t.is_alive():
                        t.join(0.2)
            except BaseException:
                self.stop("stopped")
                raise
        if self._error is not None:
            raise self._error
        if not self._result.reason:
            self._result.reason = "stopped"
        return self._result

    def _worker(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # handler error (auto_ack False) or unexpected
            self._fail(exc)

    def _loop(self) -> None:
        spec = self._spec
        while True:
            n = self._reserve()
            if n == 0:
                return
            idle = self._idle_left()
            if idle is not None and idle <= 0:
                self._release(n)
                self.stop("idle")
                return
            pop = replace(spec, batch=n)
            if spec.wait and idle is not None:
                pop = replace(pop, timeout_millis=max(1, min(spec.timeout_millis, int(math.ceil(idle * 1000.0)))))
            try:
                messages = execute_pop(self._client, pop)
            except ClientClosedError:
                self._release(n)
                self.stop("closed")
                return
            except QueenConnectionError as exc:
                self._release(n)
                log.warning("pop from queue %r failed (%s); retrying", spec.queue, exc)
                self._pause(_CONNECTION_PAUSE_S)
                continue
            except BaseException:
                self._release(n)
                raise
            self._release(n - len(messages))
            if not messages:
                if not spec.wait:
                    self._pause(_NO_WAIT_PAUSE_S)
                continue
            self._touch()
            self._handle(messages)
            if self._error is not None:
                return

    # ------------------------------------------------------------------ handling

    def _handle(self, messages: List[Message]) -> None:
        if self._each or (self._single_when_one and len(messages) == 1):
            nacked_partitions = set()
            for i, m in enumerate(messages):
                if self._error is not None:
                    self._release(len(messages) - i)
                    return
                pid = m.get("partitionId")
                if self._auto_ack and pid in nacked_partitions:
                    with self._lock:
                        self._result.skipped += 1
                    self._release(1)
                    continue
                if not self._deliver(m, [m]):
                    nacked_partitions.add(pid)
                self._check_limit()
        else:
            self._deliver(messages, messages)
            self._check_limit()

    def _deliver(self, arg: Any, msgs: List[Message]) -> bool:
        """Call the handler; auto-ack. Returns False when the handler raised (and was nacked)."""
        for _ in msgs:
            self._count_handled()
        try:
            self._handler(arg)
        except Exception as exc:
            with self._lock:
                self._result.failed += len(msgs)
            if not self._auto_ack:
                raise
            text = ("%s: %s" % (type(exc).__name__, exc))[:_MAX_ERROR_TEXT]
            log.debug("handler raised on %d message(s) of queue %r: %s", len(msgs), self._spec.queue, text)
            self._ack(msgs, False, text)
            self._touch()
            return False
        if self._auto_ack:
            self._ack(msgs, True, None)
        self._touch()
        return True

    def _ack(self, msgs: List[Message], ok: bool, error: Optional[str]) -> None:
        context: Dict[str, Any] = {}
        if self._spec.group is not None:
            context["group"] = self._spec.group
        if error is not None:
            context["error"] = error
        target: Any = msgs[0] if len(msgs) == 1 else msgs
        refused = 0
        try:
            self._client.ack(target, ok, context or None)
        except AckError as exc:
            refused = len(exc.failed) or len(msgs)
            log.warning(
                "%s of %d message(s) of queue %r refused by the broker: %s (they will be redelivered)",
                "ack" if ok else "nack",
                refused,
                self._spec.queue,
                exc,
            )
        except ClientClosedError:
            refused = len(msgs)
            log.warning("client closed before %d message(s) of queue %r were acked", len(msgs), self._spec.queue)
            self.stop("closed")
        except QueenError as exc:
            refused = len(msgs)
            log.warning(
                "%s of %d message(s) of queue %r failed: %s (they will be redelivered)",
                "ack" if ok else "nack",
                len(msgs),
                self._spec.queue,
                exc,
            )
        with self._lock:
            self._result.ack_failures += refused
            if ok:
                self._result.acked += len(msgs) - refused
            else:
                self._result.nacked += len(msgs) - refused
