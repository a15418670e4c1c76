"""Streams: stateful stream processing over Queen queues, blocking, exactly once into sinks.

>>> from queen_sync import Queen
>>> from queen_sync.streams import Stream, token_bucket_gate
>>> with Queen("http://localhost:6632") as q:                                  # doctest: +SKIP
...     runner = (Stream.from_(q.queue("orders"))
...               .window_tumbling(seconds=60)
...               .aggregate({"count": lambda v: 1, "sum": lambda v: v["amount"]})
...               .to(q.queue("orders.per-minute"))
...               .run("orders-per-minute"))
...     runner.join()

Modules: :mod:`.stream` (builder, chain rules), :mod:`.operators`, :mod:`.windows`,
:mod:`.gates`, :mod:`.hashing` (config hash), :mod:`.state` (state keys, sink ids),
:mod:`.processor` (one cycle, pure), :mod:`.runner` (threads, cycles, stop, metrics).
See docs/streams.md.
"""

from .gates import GateContext, sliding_window_gate, token_bucket_gate
from .runner import StreamRunner, stop_runners_for
from .stream import Stream

__all__ = ["Stream", "StreamRunner", "GateContext", "token_bucket_gate", "sliding_window_gate", "stop_runners_for"]
