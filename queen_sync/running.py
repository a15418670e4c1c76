"""What a client runs in the background, described: :class:`RunningConsumer`, one per
running consumer (``consume()``, blocking or ``background=True``) and per running stream
runner (:meth:`queen_sync.streams.Stream.run`) of a client in this process, for
:meth:`Queen.running_consumers` (the pytest plugin's "left running" check uses it).

Read-only snapshots: nothing here starts, stops or waits for anything, and nothing is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional

from .consumer import _consumers_of
from .streams.runner import running_runners

__all__ = ["RunningConsumer", "running_consumers"]


@dataclass(frozen=True)
class RunningConsumer:
    """One consumer or stream runner of a client, running in this process (a snapshot).

    Attributes:
        kind: ``"consumer"`` or ``"stream"`` (a stream runner).
        queue: the queue it pops (a stream's source queue).
        group: its consumer group; None for a consumer in queue mode. A stream runner pops
            for the group ``streams.<query>`` unless ``run(consumer_group=)`` named another.
        query: the stream's query name (``query_id`` given to ``run()``); None for a consumer.
        threads: how many of its threads are alive now (handler workers, fetchers, lease
            renewer, supervisor; a stream's pop, flush and cycle threads).
        started_at_millis: when it started, wall clock in milliseconds since the Unix epoch
            (``time.time() * 1000``; the streams' ``lastCycleAt`` uses the same unit).
    """

    kind: str
    queue: str
    group: Optional[str]
    query: Optional[str]
    threads: int
    started_at_millis: int


def _snapshot(kind: str, described: Mapping[str, Any]) -> RunningConsumer:
    """A :class:`RunningConsumer` from the ``describe()`` of a consumer or stream runner."""
    return RunningConsumer(
        kind,
        described["queue"],
        described["group"],
        described["query"],
        described["threads"],
        described["started_at_millis"] or 0,  # None only before start: never listed then
    )


def running_consumers(session: Any) -> List[RunningConsumer]:
    """The consumers, then the stream runners, of the client whose session is ``session``
    that run in this process now, each in the order they were found (not meaningful).

    A consumer counts until its last thread ended (its handlers included); a stream runner
    until a stop was asked for (``stop()``, ``Queen.close()``). A forked child lists none of
    its parent's (no thread crosses a fork).
    """
    out = [_snapshot("consumer", c.describe()) for c in _consumers_of(session)]
    out.extend(_snapshot("stream", r.describe()) for r in running_runners(session))
    return out
