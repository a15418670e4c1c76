"""The thread-pool consume loop behind :meth:`QueueBuilder.consume`.

Overview
--------
A :class:`Consumer` runs three kinds of threads over one queue builder's settings (a
:class:`BuilderSettings`):

* ``concurrency`` **fetchers** pop from the broker; before a pop a fetcher reserves room for
  ``batch`` messages, so at most ``concurrency × batch`` popped messages are held in memory
  (and ``limit(n)`` never overshoots); while the workers are busy a fetcher pops ahead of
  them with the room there is (at least half a batch: prefetch). Long polls are capped at
  :data:`POLL_CAP_MILLIS` so a stop is prompt; an idle consumer sends one long poll at a time.
  Through a backlog (below) the fetchers stand by: one pops only for a worker waiting for
  work that no fetcher's pop is on its way to, or ahead of the workers when all are in a
  handler or handlers take about as long as a worker's pop or longer.
* ``concurrency`` **workers** run the handler. A pop is split per partition into *lanes*;
  a lane is run by one worker at a time, in pop order: within one partition handling order
  equals push order, different partitions run in parallel. While the queue has a backlog
  (from a pop that brought all it asked for to one that brought nothing), a worker that has
  finished its unit and finds nothing queued and no fetcher's pop on its way pops itself
  (no long poll, read timeout ``ack_timeout_millis``) with the room it freed, and runs
  what that brings: in the steady state one thread pops, handles and acks, without the two
  hand-offs between threads a fetcher's pop costs. (A fetcher's pop on its way holds a
  finishing worker back only when no idle worker waits for it, or once a worker's pop came
  back empty beside fetchers' pops: more workers than partitions with messages.)
* with ``renew_lease(True)``, a **renewer** extends every lease that still has unfinished
  messages; a lease the broker refuses is lost to this consumer (its messages are neither
  handled nor acked; the broker redelivers them).

With auto-ack (the default) a handler that returns acks ``completed`` and one that raises
nacks ``failed``; every ack verdict is read (a refusal is logged and counted as an ack
failure, never as success), and lost ack replies are resent only when that cannot release a
lease too early. Broker outages (connection errors, timeouts, 5xx, 429) are retried forever
with capped, jittered backoff and logged once; ``idle_millis`` passing during an outage stops
the consumer with reason ``"unreachable"``. A stop (``limit``, ``idle_millis``, a
``stop_event``, :meth:`Queen.close`, :meth:`Consumer.stop`, ``KeyboardInterrupt``, SIGTERM /
SIGINT with ``handle_signals=True``) starts no new pop, drains what was popped up to the drain
timeout and releases the rest (ack status ``retry``); every wait of a stop is bounded. A forked
child's copy of a consumer has no threads and sends nothing; the child logs one WARNING
("started before fork; start it in the worker"), on any fork path (``_registry``).

Where each rule lives (each module's docstring gives the rules in full)
-----------------------------------------------------------------------
* ``_consumer`` — :class:`Consumer`: public API, settings, threads, start / stop / join, fork.
* ``_fetching`` — the pop loop: room reservation, prefetch, limit budget, long-poll cap,
  outage backoff, splitting a pop into units; a worker's own pop.
* ``_lanes`` — per-partition order, the worker pool, handler delivery, auto-ack verdicts,
  skipping after a nack.
* ``_acks`` — sending acks / nacks / releases, reading every reply, lost replies.
* ``_leases`` — the renewer of ``renew_lease(True)``; lost leases.
* ``_stopping`` — the stop conditions ("idle" vs "unreachable") and the stop phase (drain,
  release, bounded waits).
* ``_signals`` — SIGTERM / SIGINT as a graceful stop.
* ``_registry`` — the consumers of this process, for :meth:`Queen.close` and fork safety.
* ``_outage`` — which failures are retried, backoff, logging an outage once.
* ``_state`` — what the parts share: one lock, counters (:class:`ConsumeResult`), room,
  leases, the stop request.
* ``_calls`` — the consumer's only door to the layers below: pop (wire layer), ack / ack
  batch / release and lease extend (``queen_sync.acks``), traces of bound messages, all
  through the client's session; :class:`BuilderSettings`, the consume settings the queue
  builder hands the consumer (the consumer never sees the builder itself).
* ``_log`` — the logger and how log lines name messages (ids, never payloads).

Logging goes to the ``queen_sync.consumer`` logger.
"""

from __future__ import annotations

from ._calls import BuilderSettings
from ._consumer import DEFAULT_DRAIN_TIMEOUT_MILLIS, DEFAULT_DRAIN_TIMEOUT_SECONDS, MAX_CONCURRENCY, Consumer
from ._fetching import POLL_CAP_MILLIS
from ._leases import DEFAULT_RENEW_INTERVAL_MILLIS, MIN_RENEW_INTERVAL_MILLIS, MIN_RENEW_SECONDS, renew_interval
from ._outage import BACKOFF_BASE_SECONDS, BACKOFF_CAP_SECONDS
# in_consumer_thread / stop_consumers_for_close are for Queen.close(); _consumers_of for tests
from ._registry import _consumers_of, in_consumer_thread, stop_consumers_for_close  # noqa: F401
from ._state import ConsumeResult

__all__ = [
    "BuilderSettings",
    "Consumer",
    "ConsumeResult",
    "DEFAULT_RENEW_INTERVAL_MILLIS",
    "MIN_RENEW_INTERVAL_MILLIS",
    "MIN_RENEW_SECONDS",
    "renew_interval",
    "DEFAULT_DRAIN_TIMEOUT_MILLIS",
    "DEFAULT_DRAIN_TIMEOUT_SECONDS",
    "MAX_CONCURRENCY",
    "POLL_CAP_MILLIS",
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_CAP_SECONDS",
]
