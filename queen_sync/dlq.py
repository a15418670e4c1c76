"""Reading a queue's dead-letter queue: ``q.queue("orders").dlq("billing").limit(20).get()``.

A message lands in the dead-letter queue when a consumer nacks it (``ack(msg, False)``) more
often than the queue's ``retryLimit`` allows, or acks it with status ``"dlq"``. There is one
row per (message, consumer group); queue mode is the group ``__QUEUE_MODE__``.

The consumer group is a filter of the broker's route (``consumerGroup``). A Queen 0.15
broker does **not** apply ``limit`` on ``GET /api/v1/dlq``, answers ``offset >= 1`` with
``{"success": true, "value": null}`` and ignores ``partition``; so :meth:`DLQBuilder.get`
always fetches the queue's (or group's) full list, in one reply, and applies ``partition``,
``offset`` and ``limit`` on the client side (exact: no row is left on the broker's side).
Paging through a very large dead-letter queue therefore reads it whole each time.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

from ._validate import int_arg as _int_arg
from ._validate import validate_name
from .wire import dlq as wire_dlq
from .wire._base import Requester

__all__ = ["DLQBuilder"]


class DLQBuilder:
    """Builder for one queue's dead-letter rows, made by :meth:`QueueBuilder.dlq`.

    Setters return a new builder. Defaults: every consumer group, limit 100, offset 0.
    """

    def __init__(
        self,
        requester: Requester,
        queue: str,
        group: Optional[str] = None,
        partition: Optional[str] = None,
    ) -> None:
        self._requester = requester
        self._queue = validate_name("queue", queue)
        self._group = None if group is None else validate_name("consumer group", group)
        self._partition = None if partition is None else validate_name("partition", partition)
        self._limit = 100
        self._offset = 0

    def __repr__(self) -> str:
        return "DLQBuilder(queue=%r, group=%r, partition=%r, limit=%d, offset=%d)" % (
            self._queue,
            self._group,
            self._partition,
            self._limit,
            self._offset,
        )

    def _with(self, **changes: Any) -> "DLQBuilder":
        new = copy.copy(self)
        for k, v in changes.items():
            setattr(new, k, v)
        return new

    def limit(self, n: int) -> "DLQBuilder":
        """At most ``n`` rows (>= 1; default 100). Applied client-side (see the module doc)."""
        return self._with(_limit=_int_arg("limit", n, 1))

    def offset(self, n: int) -> "DLQBuilder":
        """Skip the ``n`` newest rows first (>= 0; default 0). Applied client-side."""
        return self._with(_offset=_int_arg("offset", n, 0))

    def partition(self, name: str) -> "DLQBuilder":
        """Only rows of partition ``name`` (``"Default"`` is the partition of that name).
        Filtered client-side over the full list (the broker's route ignores a partition).

        Raises:
            InvalidInputError: not a valid partition name."""
        return self._with(_partition=validate_name("partition", name))

    def get(self) -> List[Dict[str, Any]]:
        """Fetch the dead-letter rows, newest failure first.

        Returns:
            a list of ``{id, transactionId, partitionId, queue, partition, consumerGroup,
            data, errorMessage (the nack's error text, or None), retryCount (the retries
            used: the queue's retryLimit after a retry-limit move, 0 after status "dlq"),
            producerSub, createdAt, failedAt}`` after ``offset`` and ``limit``.

        Raises:
            BrokerError: the broker answered with ``error``.
            ProtocolError: an unexpected body.

        Wire: ``GET /api/v1/dlq?queue={q}[&consumerGroup={g}]`` (no limit / offset /
        partition sent).
        """
        rows = wire_dlq.read(self._requester, self._queue, self._group)
        if self._partition is not None:
            rows = [r for r in rows if isinstance(r, dict) and r.get("partition") == self._partition]
        return rows[self._offset : self._offset + self._limit]
