"""Embedded, in-memory Queen-compatible broker for tests and local development.

:class:`EmbeddedBroker` is a thread-safe HTTP server that answers like a real Queen 0.15
broker: same routes, status codes, response fields and semantics (per-partition FIFO, one
lease per (partition, consumer group), lease expiry and redelivery, ack cursors, retries and
the dead-letter queue, transactions, subscription modes, admin routes, and the Streams routes
``/streams/v1/queries``, ``/cycle`` and ``/state/get``...). It shares no code with the
queen_sync client. State lives in memory and survives :meth:`~EmbeddedBroker.stop` /
:meth:`~EmbeddedBroker.start` / :meth:`~EmbeddedBroker.restart` (like a real broker's
PostgreSQL), until :meth:`~EmbeddedBroker.reset` or the object is dropped.

Usage::

    from queen_sync.testing import EmbeddedBroker

    with EmbeddedBroker() as broker:          # host="127.0.0.1", port=0 = any free port
        url = broker.url                      # "http://127.0.0.1:PORT" (no trailing slash)
        ...
    broker.start(); broker.stop()             # stop closes the listener and every open connection
    broker.restart()                          # stop + start on the same port, state kept
    # in a forked child, stop() / leaving the `with` only closes the child's socket copies

Standalone: ``python -m queen_sync.testing --port 6632 [--host 127.0.0.1] [-v]``.

Fault injection (``broker.faults``, a :class:`FaultInjector`; first matching fault wins,
each match uses up one of its ``times``; ``times=None`` = until cleared)::

    broker.faults.add(method="POST", path_prefix="/api/v1/push", action="drop_before", times=1)
        # close the connection without processing the request (nothing is stored)
    broker.faults.add("POST", "/api/v1/push", "drop_after")
        # process and commit, then close without answering (a lost response)
    broker.faults.add("POST", "/api/v1/push", "status", status=503, retry_after=1, times=2)
        # answer 503 (or 429, 500...) with {"error": "injected fault"} and Retry-After: 1,
        # without processing
    broker.faults.add("GET", "/api/v1/pop", "delay", delay_ms=200)
        # sleep 200 ms, then process normally
    broker.faults.add("POST", "/api/v1/ack", "blackhole", times=1)
        # never answer nor process it, connection held open (a half-open connection)
    broker.faults.clear()
    broker.faults.history                     # every request a fault was applied to, in order:
                                              # FaultHit(at, method, path, action, status,
                                              #          delay_ms, body) (at = time.monotonic())

    broker.stop(); ...; broker.start()        # refuse connections for a while (same port)

Introspection for tests::

    broker.request_count("POST", "/api/v1/push")   # requests received (faulted ones included)
    broker.messages("orders")                     # stored messages of a queue, in push order:
                                                  # [{id, transactionId, partition, partitionId,
                                                  #   data, createdAt, traceId}, ...]
    broker.dlq("orders")                          # dead-letter rows, newest first
    broker.reset()                                # drop all state

Differences from a real broker (on purpose): the wildcard pop sees a push immediately (the
real broker's partition index lags a little), long-poll timeouts are answered on time, the
wildcard pop rotates over partitions instead of the real broker's arbitrary order, the
statistics behind the admin listings and status routes are always fresh (the real broker
recomputes them in the background, or on ``POST /api/v1/stats/refresh``) and the request
counters include the current minute (the real broker flushes them once a minute), what only a
real deployment measures (CPU, memory, event-loop lag, the database pool, PostgreSQL
statistics) is zero or empty, and a non-UUID ``traceId`` is answered ``buffered`` and dropped
(the real broker retries it forever).
"""

from ._faults import Fault, FaultHit, FaultInjector
from ._server import EmbeddedBroker

__all__ = ["EmbeddedBroker", "Fault", "FaultHit", "FaultInjector"]
