"""``queen-sync push`` from stdin: reading the JSON lines, batching them, and stopping on a signal.

This module owns the stdin side of the ``push`` command (:mod:`queen_sync.cli` owns the
parser, the push itself and the output):

* stdin is read by a daemon thread (:class:`StdinLines`), straight from its file descriptor
  (no buffered reader in between whose buffer could hold lines back, or whose lock a daemon
  thread would hold at interpreter exit), decoded as ``sys.stdin`` would decode it, and
  handed over in input order, at most ``--batch-size`` lines ahead of the pushes;
* :func:`push_lines` sends a batch once it holds ``--batch-size`` lines, or once its first
  line has waited ``--linger-millis`` (0: whatever has arrived is sent at once), or at the
  end of stdin: ``tail -f app.log | queen-sync push logs`` sends each line within the linger;
* a first SIGINT or SIGTERM stops the reading: the lines already read are pushed (each
  request bounded by the client's timeout), then :func:`push_lines` returns a
  :class:`Stopped` saying how many were pushed, or how many were not sent and why; a second
  signal acts as it did before (it interrupts that last push).

Only the standard library, :mod:`queen_sync.errors` and :mod:`queen_sync._cli_signals` are imported (the command line's
modules sit above the client, this one below it).
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections import deque
from typing import IO, Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

from ._cli_signals import HandlerScope
from .errors import InvalidInputError, QueenError

__all__ = ["DEFAULT_LINGER_MILLIS", "StdinLines", "Stopped", "loads", "push_lines"]

log = logging.getLogger("queen_sync.cli")

#: How long a partial batch waits for more lines before it is sent (``--linger-millis``).
DEFAULT_LINGER_MILLIS = 100
#: The longest a wait of the main thread lasts before it looks at the signal flag again (a
#: lock wait is woken by a signal on POSIX; elsewhere it may not be).
_WAIT_SLICE = 0.5
_READ_SIZE = 65536

#: A stdin line: (line number, text, time.monotonic() when it was read).
Line = Tuple[int, str, float]


def _finite_float(text: str) -> float:
    """``parse_float`` of the JSON reader: a number literal too large for a float (``1e400``)
    is refused, where ``float()`` reads it as Infinity (refused as NaN / Infinity, or sent as
    null with ``--nan-as-null``: a number the user wrote, silently gone)."""
    value = float(text)
    if math.isinf(value):
        raise ValueError("number %s is out of range (a JSON number must fit in a double)" % text)
    return value


def loads(text: str) -> Any:
    """``json.loads`` with :func:`_finite_float` (``NaN`` / ``Infinity`` literals still read)."""
    return json.loads(text, parse_float=_finite_float)


class StdinLines:
    """The non-blank lines of ``stream`` (default ``sys.stdin``), read by a daemon thread and
    handed over in order; at most ``ahead`` lines wait to be taken (the thread then stops
    reading until :meth:`take`). A read or decoding error ends the lines: :attr:`error`."""

    def __init__(self, ahead: int, stream: Optional[IO[str]] = None) -> None:
        self._stream = sys.stdin if stream is None else stream
        self._ahead = ahead
        self._ready: Deque[Line] = deque()
        self._mutex = threading.Lock()
        self._room = threading.Condition(self._mutex)  # the reader waits here while `ahead` are ready
        self._wake = threading.Lock()  # a bare lock as a binary semaphore: released to wake the taker
        self._wake.acquire()
        self.ended = False  # no line will be added (end of stdin, an error, or close())
        self.error: Optional[QueenError] = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="queen-sync-stdin", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Wake the thread waiting in :meth:`wait` (safe in a signal handler: no lock is waited for)."""
        try:
            self._wake.release()
        except RuntimeError:  # already released: a wake-up is pending
            pass

    def wait(self, count: int, deadline: Optional[float], stop: Callable[[], bool]) -> None:
        """Return once ``count`` lines are ready, the lines ended, ``stop()`` is true, or at
        ``deadline`` (``time.monotonic()``; None: none)."""
        while True:
            with self._mutex:
                if len(self._ready) >= count or self.ended or stop():
                    return
            timeout = _WAIT_SLICE if deadline is None else min(_WAIT_SLICE, deadline - time.monotonic())
            if timeout <= 0:
                return
            self._wake.acquire(timeout=timeout)

    def take(self, count: int) -> List[Line]:
        """Up to ``count`` of the ready lines, oldest first (no wait)."""
        with self._mutex:
            got = [self._ready.popleft() for _ in range(min(count, len(self._ready)))]
            self._room.notify_all()
        return got

    def exhausted(self) -> bool:
        """True once the lines ended and every one was taken."""
        with self._mutex:
            return self.ended and not self._ready

    def close(self) -> List[Line]:
        """Stop handing lines over (a line the thread reads from now on is dropped); returns
        the lines ready and not taken."""
        with self._mutex:
            self._closed = True
            self.ended = True
            rest = list(self._ready)
            self._ready.clear()
            self._room.notify_all()
        return rest

    def _texts(self) -> Iterator[str]:
        """The lines of stdin, as ``sys.stdin`` reads them (its encoding and errors, universal
        newlines), each decoded alone: a line that is not text fails after the ones before it."""
        encoding = getattr(self._stream, "encoding", None) or "utf-8"
        errors = getattr(self._stream, "errors", None) or "strict"
        try:
            fd = self._stream.fileno()
            by_bytes = "\n".encode(encoding) == b"\n" and "\r".encode(encoding) == b"\r"
        except (AttributeError, OSError, ValueError, LookupError):  # not a file (a test's StringIO)
            by_bytes = False
        if not by_bytes:  # or an encoding where a newline byte may sit inside a character (UTF-16)
            yield from iter(self._stream.readline, "")
            return
        pending = b""
        while True:
            chunk = os.read(fd, _READ_SIZE)
            if chunk:
                *lines, pending = (pending + chunk).split(b"\n")
            else:  # the end: a last line without its newline
                lines = [pending] if pending else []
            for raw in lines:
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                for text in raw.decode(encoding, errors).split("\r"):  # a lone CR ends a line too
                    yield text + "\n"
            if not chunk:
                return

    def _run(self) -> None:
        n = 0
        try:
            for text in self._texts():
                n += 1
                if not text.strip():
                    continue
                with self._mutex:
                    while len(self._ready) >= self._ahead and not self._closed:
                        self._room.wait()
                    if self._closed:
                        return
                    self._ready.append((n, text, time.monotonic()))
                self.wake()
                log.debug("read stdin line %d", n)
        except UnicodeDecodeError as exc:
            self.error = InvalidInputError("stdin line %d is not %s text: %s" % (n + 1, exc.encoding, exc.reason))
        except Exception as exc:  # an OSError of the read
            self.error = QueenError("reading stdin failed after line %d: %s" % (n, exc))
        finally:
            with self._mutex:
                self.ended = True
            self.wake()


class Stopped:
    """How a push from stdin ended on a signal: ``signum`` (SIGINT or SIGTERM) and ``detail``,
    the text of the command's stderr line (how many messages were pushed, or not sent)."""

    def __init__(self, signum: int, detail: str) -> None:
        self.signum = signum
        self.detail = detail


class _FirstSignal(HandlerScope):
    """A context manager (main thread only): the first SIGINT / SIGTERM sets ``signum`` and
    wakes ``lines``; the handlers then before it are put back, so that a second signal acts
    as it did (raises KeyboardInterrupt, or what the SIGTERM handler before raises)."""

    def __init__(self, lines: StdinLines) -> None:
        super().__init__((signal.SIGINT, signal.SIGTERM))
        self._lines = lines
        self.signum: Optional[int] = None

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is None:  # no exception here: a push in flight goes on to its reply
            self.signum = signum
            self.restore()
            self._lines.wake()


def _lines_text(numbers: List[int]) -> str:
    return "stdin line %d" % numbers[0] if len(numbers) == 1 else "stdin lines %d-%d" % (numbers[0], numbers[-1])


def push_lines(lines: StdinLines, parse: Callable[[int, str], Any],
               send: Callable[[List[Any], List[int], int], None], batch_size: int, linger_millis: int) -> Optional[Stopped]:
    """Push the lines of ``lines`` in batches: ``parse(line number, text)`` makes a push item
    (it raises on a bad line: the batch it would join is not sent), ``send(items, line numbers,
    pushed before)`` pushes them (it raises on a failure). Returns None at the end of stdin,
    a :class:`Stopped` after a first SIGINT / SIGTERM (see the module's docstring)."""
    linger = linger_millis / 1000.0
    batch: List[Any] = []
    numbers: List[int] = []
    first = 0.0  # when the batch's first line was read
    pushed = 0
    with _FirstSignal(lines) as sig:
        stop = lambda: sig.signum is not None  # noqa: E731
        try:
            while sig.signum is None:
                if not batch:
                    if lines.exhausted():  # the batches before a read error were sent
                        if lines.error is not None:
                            raise lines.error
                        break
                    lines.wait(1, None, stop)
                else:
                    lines.wait(batch_size - len(batch), first + linger, stop)
                for n, text, at in lines.take(batch_size - len(batch)):
                    if not batch:
                        first = at
                    batch.append(parse(n, text))
                    numbers.append(n)
                if batch and (len(batch) >= batch_size or time.monotonic() >= first + linger or lines.exhausted()):
                    send(batch, numbers, pushed)
                    pushed += len(batch)
                    batch, numbers = [], []
        finally:
            rest = lines.close()
        if sig.signum is None:
            return None
        return Stopped(sig.signum, _push_the_rest(batch, numbers, rest, parse, send, batch_size, pushed))


def _push_the_rest(batch: List[Any], numbers: List[int], rest: List[Line], parse: Callable[[int, str], Any],
                   send: Callable[[List[Any], List[int], int], None], batch_size: int, pushed: int) -> str:
    """After a first signal: push the lines read and not sent (``batch``, parsed, then
    ``rest``); the detail of the command's stderr line."""
    error: Optional[BaseException] = None
    unread = [n for n, _, _ in rest]
    for n, text, _ in rest:  # parsed up to a bad line: the lines before it are sent
        try:
            batch.append(parse(n, text))
        except Exception as exc:
            error = exc
            break
        numbers.append(n)
        unread.pop(0)
    items = batch
    before = pushed
    while items:
        part = items[:batch_size]
        try:
            send(part, numbers[:batch_size], pushed)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # a second signal, in that push: it may have arrived or not
                raise type(exc)("stopped reading stdin; %d message(s) were pushed; a second signal interrupted the "
                                "push of %s (it may have arrived), %d message(s) read after it not sent" % (
                                    pushed, _lines_text(numbers[:batch_size]), len(items) - len(part) + len(unread)))
            return "stopped reading stdin; %d message(s) were pushed, %d read were not sent: %s" % (
                pushed, len(items) + len(unread), exc)
        pushed += len(part)
        items, numbers = items[batch_size:], numbers[batch_size:]
    if error is not None:
        return "stopped reading stdin; %d message(s) were pushed, %d read were not sent: %s" % (
            pushed, len(unread), error)
    return "stopped reading stdin; %d message(s) were pushed (%d of them after the signal: read, not yet sent)" % (
        pushed, pushed - before)
