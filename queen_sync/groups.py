"""Consumer-group maintenance: delete a group, move its subscription timestamp, seek it.

A consumer group's position on a queue is one cursor per partition (ack moves it). These
calls move or drop those cursors on the broker; they are offered as
:meth:`Queen.delete_consumer_group`, :meth:`Queen.update_consumer_group_timestamp` and on
``Queen.admin`` (``delete_consumer_group_for_queue``, ``seek_consumer_group``,
``seek_partition_to_end``).

>>> q.delete_consumer_group("billing")                                   # doctest: +SKIP
>>> q.admin.seek_consumer_group("billing", "orders", timestamp=datetime(2026, 1, 1))  # doctest: +SKIP

Names must be URL-safe (``[A-Za-z0-9._~-]``); bad input raises InvalidInputError before
anything is sent. A refusal in a 200 body raises BrokerError.
"""

# mypy: no-warn-return-any
# (functions return the broker's decoded JSON body, typed Any by the wire layer, as the
# documented dict / list shape of a real 0.15 broker; they pass it on unchanged)

from __future__ import annotations

import datetime as _dt
from typing import Any, Dict, Optional, Union

from ._validate import bool_arg as _bool_arg
from ._validate import timestamp_arg, validate_name
from .errors import InvalidInputError
from .wire import groups as wire_groups
from .wire._base import Requester

Timestamp = Union[str, _dt.datetime]

__all__ = ["delete_consumer_group", "update_consumer_group_timestamp", "seek", "seek_partition_to_end"]


def delete_consumer_group(
    requester: Requester, group: str, delete_metadata: bool = True, *, queue: Optional[str] = None
) -> Dict[str, Any]:
    """Drop ``group``'s cursors (and leases) on every queue, or on ``queue`` only.

    Afterwards the group is new again: its next pop starts from its subscription mode
    (the whole history by default), so a group deleted and re-created under the same name
    reads every message again. Queue mode (``__QUEUE_MODE__``) is a group like the others.

    Args:
        group: the consumer group name.
        delete_metadata: also drop the group's subscription record (mode / timestamp); the
            broker default is True.
        queue: only this queue (``None``: every queue).

    Returns:
        ``{success: True, consumerGroup, deletedPartitions, metadataDeleted[, queueName]}``.

    Wire: ``DELETE /api/v1/consumer-groups/{group}[/queues/{queue}]?deleteMetadata=true|false``
    (ADMIN).
    """
    validate_name("consumer group", group)
    _bool_arg("delete_metadata", delete_metadata)
    if queue is not None:
        validate_name("queue", queue)
    return wire_groups.delete(requester, group, delete_metadata, queue)


def update_consumer_group_timestamp(requester: Requester, group: str, timestamp: Timestamp) -> Dict[str, Any]:
    """Move ``group``'s subscription timestamp (where it starts on partitions it has not
    consumed yet). It does not move existing cursors: use :func:`seek` for that.

    Args:
        timestamp: ISO-8601 text or a datetime (naive means UTC).

    Returns:
        ``{success: True, consumerGroup, newTimestamp, rowsUpdated}``.

    Wire: ``POST /api/v1/consumer-groups/{group}/subscription`` ``{"subscriptionTimestamp": ts}``.
    """
    validate_name("consumer group", group)
    ts = timestamp_arg("timestamp", timestamp)
    return wire_groups.set_subscription(requester, group, ts)


def seek(
    requester: Requester,
    group: str,
    queue: str,
    *,
    to_end: bool = False,
    timestamp: Optional[Timestamp] = None,
) -> Dict[str, Any]:
    """Move ``group``'s cursor on every partition of ``queue`` and release its leases.

    Exactly one of:
        to_end: True skips every message stored now (only later pushes are delivered).
        timestamp: ISO-8601 text or datetime; messages created **after** it are delivered
            again (a seek back in time replays them; forward skips).

    Returns:
        ``{success: True, consumerGroup, queueName, seekToEnd, targetTimestamp, partitionsUpdated}``.

    Raises:
        InvalidInputError: neither or both of ``to_end`` / ``timestamp``.

    Wire: ``POST /api/v1/consumer-groups/{group}/queues/{queue}/seek`` ``{"toEnd": true}`` or
    ``{"timestamp": ts}``. A timestamp seek is idempotent and retried like a read; a seek to
    the end is not (a resend after a lost reply would also skip messages pushed in
    between), so it is retried only when it was not sent (or refused with 429 / 503), else
    a lost reply raises :class:`~queen_sync.errors.QueenConnectionError`.
    """
    validate_name("consumer group", group)
    validate_name("queue", queue)
    _bool_arg("to_end", to_end)
    if to_end == (timestamp is not None):
        raise InvalidInputError("seek needs exactly one of to_end=True or timestamp=...")
    ts = None if to_end else timestamp_arg("timestamp", timestamp)
    return wire_groups.seek(requester, group, queue, to_end=to_end, timestamp=ts)


def seek_partition_to_end(requester: Requester, group: str, queue: str, partition: str) -> Dict[str, Any]:
    """Skip ``group`` past every message stored now in one partition of ``queue``.

    Only a group that already has a cursor on the partition (it popped from it) is moved, its
    lease released; for any other the broker changes nothing and answers ``updated: False``
    (Queen 0.15.1, checked 2026-12-02): its first pop starts where it would have.

    Returns:
        ``{success: True, consumerGroup, queueName, partitionName, cursorMovedTo (the newest
        message's time), updated}``.

    Raises:
        BrokerError: ``Partition not found`` (an unknown queue or partition).

    Wire: ``POST /api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek``
    (no body is read; ``{}`` is sent). Not in the 0.15 captures; a broker without the route
    raises RouteNotFoundError. Not resent after a lost reply (a resend would also skip
    messages pushed in between): that raises :class:`~queen_sync.errors.QueenConnectionError`.
    """
    validate_name("consumer group", group)
    validate_name("queue", queue)
    validate_name("partition", partition)
    return wire_groups.seek_partition_to_end(requester, group, queue, partition)
