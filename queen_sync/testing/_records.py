"""The records of the embedded broker's store: queues, partitions, messages, the (partition,
consumer group) rows with their cursor and lease, leases, a transaction's undo journal, the
Streams queries and state rows; and the option defaults and error texts the replies share.

Data only: what the routes do with them is in :mod:`._store` (the shared lock-held rules),
:mod:`._transactions`, :mod:`._state` (the messaging routes) and :mod:`._streams`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ._util import uuid4

QUEUE_MODE = "__QUEUE_MODE__"

OPTION_DEFAULTS: Dict[str, Any] = {
    "leaseTime": 300,
    "retryLimit": 3,
    "retryDelay": 1000,
    "deadLetterQueue": False,
    "dlqAfterMaxRetries": False,
    "priority": 0,
    "delayedProcessing": 0,
    "windowBuffer": 0,
    "maxSize": 0,
    "ttl": 3600,
    "retentionSeconds": 0,
    "completedRetentionSeconds": 0,
    "retentionEnabled": False,
    "encryptionEnabled": False,
    "maxWaitTimeSeconds": 0,
}
BOOL_OPTIONS = {"deadLetterQueue", "dlqAfterMaxRetries", "retentionEnabled", "encryptionEnabled"}

INVALID_LEASE = "Invalid or expired lease"
NOT_FOUND = "Message not found"

Reply = Tuple[int, Any]


class Msg(object):
    __slots__ = ("id", "txid", "data", "created", "trace_id", "partition", "idx", "deleted")

    def __init__(self, mid: str, txid: str, data: Any, created: int, trace_id: Optional[str],
                 partition: "Partition", idx: int) -> None:
        self.id = mid
        self.txid = txid
        self.data = data
        self.created = created
        self.trace_id = trace_id
        self.partition = partition
        self.idx = idx
        self.deleted = False


class Row(object):
    """One (partition, consumer group) cursor with its lease: PostgreSQL's partition_consumers."""

    __slots__ = ("group", "cursor", "lease_id", "batch_size", "acked", "retry",
                 "total_consumed", "batches_consumed", "last_consumed", "created")

    def __init__(self, group: str, cursor: int, created: int) -> None:
        self.group = group
        self.cursor = cursor
        self.lease_id: Optional[str] = None
        self.batch_size = 0
        self.acked = 0
        self.retry = 0
        self.total_consumed = 0
        self.batches_consumed = 0
        self.last_consumed: Optional[int] = None
        self.created = created

    def snapshot(self) -> tuple:
        return tuple(getattr(self, k) for k in Row.__slots__)

    def restore(self, snap: tuple) -> None:
        for k, v in zip(Row.__slots__, snap):
            setattr(self, k, v)


class Partition(object):
    __slots__ = ("id", "name", "queue", "messages", "created_list", "by_tx", "rows", "created",
                 "last_activity")

    def __init__(self, name: str, queue: "Queue", created: int) -> None:
        self.id = uuid4()
        self.name = name
        self.queue = queue
        self.messages: List[Msg] = []
        self.created_list: List[int] = []
        self.by_tx: Dict[str, Msg] = {}
        self.rows: Dict[str, Row] = {}
        self.created = created
        self.last_activity: Optional[int] = None

    def live_count(self) -> int:
        return sum(1 for m in self.messages if not m.deleted)


class Queue(object):
    __slots__ = ("id", "name", "namespace", "task", "options", "partitions", "created", "rr")

    def __init__(self, name: str, namespace: str, task: str, created: int) -> None:
        self.id = uuid4()
        self.name = name
        self.namespace = namespace
        self.task = task
        self.options: Dict[str, Any] = dict(OPTION_DEFAULTS)
        self.partitions: Dict[str, Partition] = {}
        self.created = created
        self.rr = 0

    def lease_seconds(self) -> float:
        lt = self.options.get("leaseTime") or 0
        return float(lt) if lt > 0 else 60.0


class Lease(object):
    __slots__ = ("id", "queue", "group", "expires", "partitions")

    def __init__(self, lid: str, queue: str, group: str, expires: int) -> None:
        self.id = lid
        self.queue = queue
        self.group = group
        self.expires = expires
        self.partitions: List[Partition] = []


class Journal(object):
    """Undo log of one transaction: everything needed to roll the store back."""

    def __init__(self) -> None:
        self.rows: Dict[int, Tuple[Partition, str, Optional[tuple]]] = {}
        self.messages: List[Msg] = []
        self.partitions: List[Partition] = []
        self.queues: List[Queue] = []
        self.dlq_len: Optional[int] = None
        self.leases: List["Lease"] = []

    def save_row(self, part: Partition, group: str) -> None:
        key = id(part) ^ hash(group)
        if key in self.rows:
            return
        row = part.rows.get(group)
        self.rows[key] = (part, group, row.snapshot() if row is not None else None)


class Query(object):
    __slots__ = ("id", "name", "source_queue", "sink_queue", "config_hash")

    def __init__(self, name: str, source_queue: str, sink_queue: Optional[str], config_hash: str) -> None:
        self.id = uuid4()
        self.name = name
        self.source_queue = source_queue
        self.sink_queue = sink_queue
        self.config_hash = config_hash


class StreamsStore(object):
    """Registered queries (by name and by id) and state rows: ``shards[(query id, partition id)]``
    maps a key to ``(value, updated_at in epoch microseconds)``."""

    def __init__(self) -> None:
        self.by_name: Dict[str, Query] = {}
        self.by_id: Dict[str, Query] = {}
        self.shards: Dict[Tuple[str, str], Dict[str, Tuple[Any, int]]] = {}
