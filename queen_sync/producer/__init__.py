"""Buffered, batching producer: ``q.queue("orders").partition("p").buffer(500, 100).push(item)``.

Each ``(queue, partition)`` gets one :class:`PushBuffer` with its own background thread
(started on the first buffered push), modelled on OpenTelemetry's batch processor:

- **One buffer, one set of options.** A buffer keeps the :class:`BufferOptions` it was
  opened with until the client is closed; other options for the same ``(queue,
  partition)`` raise :class:`InvalidInputError` at ``push()`` (nothing buffered), never
  silently ignored.

- **Validated at push time.** Items are turned into wire items and JSON-encoded when
  :meth:`PushBuffer.add` is called (``codec.encode_push_fragment``), so a bad ``traceId``
  or a payload that is not JSON-serialisable raises :class:`InvalidInputError` in the
  pushing thread, and nothing is buffered. A batch body is just the buffered fragments
  joined (``codec.join_push_fragments``); it is built **once**, so every resend carries the
  same ``transactionId`` s and the broker answers ``duplicate`` for what it already stored.
- **Batching.** A batch is sent when ``message_count`` messages or ``max_bytes`` bytes of
  encoded items are buffered, ``time_millis`` after the oldest buffered message arrived,
  on :meth:`PushBuffer.flush` / :meth:`BufferManager.flush_all`, or on close. A batch holds
  at most ``message_count`` messages and ``max_bytes`` bytes of encoded items: a
  ``push(list)`` is split into fragments that fit both, and only an item alone over
  ``max_bytes`` makes a larger batch (it is sent alone).
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
  buffer (failed sends, last error, and the send in flight: how long, and while the
  transport is still retrying it, its failed attempts and their latest error, which the
  transport tells the buffer through ``on_retry``). Never a line per resend.
- **Exit.** An ``atexit`` hook flushes what is still buffered (bounded by the close
  timeout: with the broker unreachable, exit waits that long, 30 s by default); messages
  it cannot send are logged at ERROR and reported by a
  :class:`RuntimeWarning` ("queen_sync: N buffered message(s) could not be sent to <urls>
  before exit").

Logging goes to the ``queen_sync.producer`` logger.

Where each part lives
---------------------
* ``_options`` — :class:`BufferOptions`: the batch triggers and the bound, checked when made.
* ``_buffer`` — :class:`PushBuffer`: one ``(queue, partition)``'s FIFO, bound and triggers,
  its sender thread and resend loop (transient failures, permanent refusals, ``failed``
  items), flush / close of one buffer, its counters.
* ``_manager`` — :class:`BufferManager`: the buffers of one client, a buffered push
  (validation, encoding, receipts), flush of all, close (the ERROR and the
  :class:`RuntimeWarning`), stats of all; the fork and ``atexit`` hooks over every manager.
"""

from __future__ import annotations

from ._buffer import FAILED_ITEM_ROUNDS, PushBuffer
from ._manager import DEFAULT_CLOSE_TIMEOUT_MILLIS, BufferManager
from ._options import BufferOptions

__all__ = ["BufferOptions", "PushBuffer", "BufferManager", "FAILED_ITEM_ROUNDS", "DEFAULT_CLOSE_TIMEOUT_MILLIS"]
