"""All push buffers of one client, :class:`BufferManager`: the ``(queue, partition)`` →
:class:`PushBuffer` registry, a buffered push (validated and encoded in the pushing thread,
then handed to its buffer), flushing every buffer at once, and close; plus the process-wide
hooks over every live manager: a forked child forgets its parent's buffers, and interpreter
exit flushes what is left (bounded by the close timeout).

The rules it keeps are listed in :mod:`queen_sync.producer`. Logging goes to the
``queen_sync.producer`` logger.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import warnings
import weakref
from dataclasses import asdict
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import _fork, codec
from ..errors import ClientClosedError, InvalidInputError
from ..transport import Backoff, ExponentialBackoff, Transport
from ._buffer import PushBuffer, _deadline
from ._options import BufferOptions

__all__ = ["BufferManager", "DEFAULT_CLOSE_TIMEOUT_MILLIS"]

log = logging.getLogger("queen_sync.producer")

#: Default bound of close()'s final flush, in milliseconds.
DEFAULT_CLOSE_TIMEOUT_MILLIS = 30000

# the queen_sync package: frames in it are the library's own (see _outside_stacklevel)
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


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


def _settings(options: BufferOptions) -> str:
    return ", ".join("%s=%s" % kv for kv in asdict(options).items())


def _check_same_options(buf: PushBuffer, options: BufferOptions) -> None:
    """Raise when ``options`` are not those of the open buffer ``buf``: one buffer per
    ``(queue, partition)`` keeps the settings it was opened with, and other settings must
    not be ignored silently."""
    if buf.options == options:
        return
    theirs, mine = asdict(buf.options), asdict(options)
    differ = ", ".join(k for k in mine if mine[k] != theirs[k])
    raise InvalidInputError(
        "the push buffer of %s is already open with other settings (%s; asked for %s; they differ in %s): "
        "a buffer keeps its settings until the client is closed (flush() sends what it holds but keeps it "
        "open), so call buffer() with the open buffer's settings, or push with other settings through "
        "another Queen client" % (buf._affinity, _settings(buf.options), _settings(options), differ)
    )


def _partition_key(partition: Optional[str]) -> Optional[str]:
    """The buffer key of a partition: ``"Default"`` is the broker's partition of a push
    without one, so both share one buffer (two would reorder that partition's messages)."""
    return None if partition == "Default" else partition


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


class _ExitOrder:
    pass


# os.register_at_fork, and uWSGI's post-fork hook (it forks without Python's at-fork hooks)
_fork.after_fork_in_child(_reset_managers_after_fork)
# urllib3 closes every connection pool at exit from a weakref.finalize, and weakref registers
# the atexit hook that runs those when the process makes its first finalize: normally at the
# client's first request, after the hook below, so it would run first (atexit is LIFO) and
# leave the exit flush pools without connections (it waited close_timeout_millis for one and
# lost the buffer). A finalize made here registers weakref's hook before ours: this hook, and
# any registered later (the Flask / Django close), runs while the pools still work.
weakref.finalize(_ExitOrder(), int)
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
        """The buffer of ``(queue, partition)``, made with ``options`` on first use.

        Raises:
            InvalidInputError: that buffer is open with other options: a buffer keeps the
                options it was opened with until the client is closed.
            ClientClosedError: the client is closed.
        """
        self._check_fork()
        partition = _partition_key(partition)
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
        _check_same_options(buf, options)
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
            InvalidInputError: a bad item or payload (nothing buffered), more items than
                the buffer's ``max_messages``, or the buffer of ``(queue, partition)`` is open
                with other options (nothing buffered).
            BufferFullError: no room within ``block_timeout_millis``.
            ClientClosedError: the client is closed.
        """
        self._check_fork()
        if self._closed:
            raise ClientClosedError("the Queen client is closed")
        partition = _partition_key(partition)
        n = len(items)
        assert options.max_messages is not None  # BufferOptions.__post_init__ fills in the default
        if n > options.max_messages:
            raise InvalidInputError(
                "push of %d items exceeds the buffer bound max_messages=%d; push them unbuffered or raise the bound"
                % (n, options.max_messages)
            )
        step = options.message_count
        fragments: List[Tuple[bytes, int]]
        if n <= step:  # the common case (e.g. a single item): one encode, one fragment
            frag, ids_all = codec.encode_push_fragment(queue, partition, items, nan_as_null=self._nan_as_null)
            nbytes = len(frag)
            fragments = [(frag, n)]
            if nbytes > options.max_bytes and n > 1:
                fragments, ids_all = [], []
                self._split(queue, partition, items, options.max_bytes, fragments, ids_all)
                nbytes = sum(len(f) for f, _ in fragments)
        else:
            # encoded in chunks below: check every item first so that an error names its
            # index in the whole list, not in its chunk (ids are not minted for this check)
            codec.build_push_items(queue, partition, items, _no_id)
            fragments, ids_all = [], []
            for start in range(0, n, step):
                chunk = items[start : start + step]
                frag, ids = codec.encode_push_fragment(queue, partition, chunk, nan_as_null=self._nan_as_null)
                if len(frag) > options.max_bytes and len(chunk) > 1:
                    self._split(queue, partition, chunk, options.max_bytes, fragments, ids_all)
                else:
                    fragments.append((frag, len(chunk)))
                    ids_all.extend(ids)
            nbytes = sum(len(f) for f, _ in fragments)
        buf = self._buffers.get((queue, partition))
        if buf is None or buf.options is not options:  # a new buffer, or other options to compare
            buf = self.buffer_for(queue, partition, options)
        buf._add(fragments, n, nbytes)
        return [
            {"index": i, "status": "pending", "transaction_id": tx, "queueName": queue}
            for i, tx in enumerate(ids_all)
        ]

    def _split(
        self,
        queue: str,
        partition: Optional[str],
        items: Sequence[Mapping[str, Any]],
        max_bytes: int,
        fragments: List[Tuple[bytes, int]],
        ids: List[str],
    ) -> None:
        """Encode ``items``, whose one fragment came out over ``max_bytes``, as fragments of
        at most ``max_bytes`` each, appended to ``fragments`` (and their ids to ``ids``): the
        list is halved and each half encoded again (the ids minted for the whole are
        dropped: nothing was sent), so that a batch of a list push honours ``max_bytes`` as
        one of single pushes does. Only an item alone over the bound makes a larger
        fragment (it is sent alone)."""
        half = len(items) // 2
        for part in (items[:half], items[half:]):
            frag, frag_ids = codec.encode_push_fragment(queue, partition, part, nan_as_null=self._nan_as_null)
            if len(frag) > max_bytes and len(part) > 1:
                self._split(queue, partition, part, max_bytes, fragments, ids)
            else:
                fragments.append((frag, len(part)))
                ids.extend(frag_ids)

    def _snapshot(self) -> List[PushBuffer]:
        self._check_fork()
        with self._lock:
            return list(self._buffers.values())

    def flush(self, queue: str, partition: Optional[str], timeout_millis: Optional[int] = None) -> int:
        """Flush the buffer of ``(queue, partition)`` (see :meth:`PushBuffer.flush`); 0 when it has none."""
        self._check_fork()
        buf = self._buffers.get((queue, _partition_key(partition)))
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
        stuck: List[str] = []  # per buffer left with unsent messages: its count, failed sends, why
        for b in buffers:
            u, f, why = b._close(deadline)
            unsent += u
            failed += f
            if u:
                with b._lock:
                    stuck.append("%s: %d unsent, %d failed send(s) in all; %s" % (b._affinity, u, b._s["retries"], why))
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
            ``{"activeBuffers", "totalBufferedMessages" (unsent), "oldestBufferAge",
            "flushesPerformed" (batches sent), "delivered", "duplicates", "failed",
            "retries", "buffers": {"queue/partition": PushBuffer.stats()}}``.
            ``oldestBufferAge``: the largest ``oldest_age_millis`` of the buffers, in
            **milliseconds**: how long the oldest message not yet delivered (waiting, or in a
            batch in flight / being resent) has been buffered; 0.0 when nothing is unsent.
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
