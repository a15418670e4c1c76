"""Helpers for the streams tests: source messages and queue stand-ins."""

from __future__ import annotations

from typing import Any, Dict

from queen_sync.streams.state import to_iso_ms

PID = "11111111-1111-4111-8111-111111111111"


class Q:
    """A queue-builder stand-in (only its name is read by the pure parts)."""

    def __init__(self, name: str) -> None:
        self.name = name


def msg(n: int, created_ms: int, data: Any, *, pid: str = PID, partition: str = "P1", lease: str = "L1") -> Dict[str, Any]:
    """A popped message: id ``m<n>`` (zero-padded so ids sort like n), transactionId ``t<n>``."""
    created = to_iso_ms(created_ms)[:-1] + "123Z"  # microseconds, as the broker sends them
    return {"id": "m%06d" % n, "transactionId": "t%d" % n, "partitionId": pid, "partition": partition,
            "data": data, "createdAt": created, "leaseId": lease, "consumerGroup": "streams.q"}
