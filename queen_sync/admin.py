"""Admin, status, statistics and maintenance calls of a Queen 0.15 broker (``Queen.admin``).

>>> q = Queen("http://127.0.0.1:6632")                                # doctest: +SKIP
>>> q.admin.get_overview()["queues"]                                  # doctest: +SKIP
>>> q.admin.list_messages(queue="orders", status="dead_letter", limit=20)   # doctest: +SKIP

Every method is one blocking HTTP call and returns the broker's decoded JSON body (a dict or
a list, as documented per method; the shapes are those of a real 0.15 broker). Common rules:

- A 200 reply whose body carries ``error`` (or ``success: false``) raises
  :class:`~queen_sync.errors.BrokerError` (``.error`` is the broker's text, ``.body`` the body),
  e.g. ``get_queue("missing")`` → ``BrokerError("... Queue not found")``.
- A route the broker does not have (a 0.15 broker answers 404 with an HTML page) raises
  :class:`~queen_sync.errors.RouteNotFoundError` naming the method and path. The official
  client's ``get_partitions``, ``clear_queue``, ``retry_message`` and
  ``move_message_to_dlq`` are offered for parity and always raise it against 0.15.
- Names that go into a path (queue, consumer group, partition, partition id, transaction
  id) must be URL-safe (``[A-Za-z0-9._~-]``; a 0.15 broker does not URL-decode paths), else
  :class:`~queen_sync.errors.InvalidInputError` is raised before anything is sent. Query
  values are URL-encoded. Timestamps are ISO-8601 strings (``2026-11-30T06:21:21.749Z``) or
  ``datetime`` objects (naive means UTC).
- Transport failures raise :class:`~queen_sync.errors.QueenConnectionError` and friends;
  ``GET`` calls are retried like every idempotent call of the client.

Consumer-group maintenance (delete, subscription timestamp, seek) lives in
:mod:`queen_sync.groups`; dead-letter reads in :mod:`queen_sync.dlq`; traces in
:mod:`queen_sync.tracing`. The admin object offers them too, under the official names.
This module checks the arguments; the routes are in :mod:`queen_sync.wire`.
"""

# mypy: no-warn-return-any
# (methods return the broker's decoded JSON body, typed Any by the wire layer, as the documented
# dict / list shape of a real 0.15 broker; they pass it on unchanged)

from __future__ import annotations

import datetime as _dt
from typing import Any, Dict, List, Mapping, Optional, Tuple, TypedDict, Union

from ._validate import bool_arg as _bool_arg
from ._validate import int_arg as _int_arg
from ._validate import str_arg as _str_arg
from ._validate import timestamp_arg, validate_name
from .errors import InvalidInputError, QueenHTTPError
from .groups import delete_consumer_group, seek, seek_partition_to_end, update_consumer_group_timestamp
from .wire import admin as wire_admin
from .wire import groups as wire_groups
from .wire import resources as wire_resources
from .wire import traces as wire_traces
from .wire._base import Requester

__all__ = ["Admin", "iso_timestamp"]

Timestamp = Union[str, _dt.datetime]
JSON = Any


# --------------------------------------------------------------------------- argument checks


def iso_timestamp(name: str, value: Any) -> str:
    """Check a timestamp argument and return it as the text the broker takes, always
    ``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC (millisecond precision, truncated).

    Args:
        name: the argument name (for the error message).
        value: a ``datetime`` (naive means UTC) or an ISO-8601 string such as
            ``2026-11-30T06:21:21.749Z``, ``2026-11-30T07:21:21+01:00`` or ``2026-11-30``
            (without an offset means UTC); see :func:`queen_sync._validate.parse_iso_timestamp`.

    Raises:
        InvalidInputError: anything else, e.g. week dates (``2026-W01-1``) or basic forms
            (``20260101T000000Z``), which a broker cannot read.
    """
    return timestamp_arg(name, value)


def _opt_str(name: str, value: Any) -> Optional[str]:
    """An optional filter: ``None`` stays ``None`` (not sent), else a non-empty str."""
    return None if value is None else _str_arg(name, value)


#: The statuses a Queen 0.15 broker gives a stored message (``list_messages_v1``); a filter on
#: any other value (``failed`` among them) can match nothing, so it is refused.
MESSAGE_STATUSES = ("pending", "processing", "completed", "dead_letter")


def _opt_status(value: Any) -> Optional[str]:
    """An optional ``status`` filter: ``None`` stays ``None``, else one of :data:`MESSAGE_STATUSES`."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in MESSAGE_STATUSES:
        raise InvalidInputError(
            "status must be one of %s, got %r (a stored message is never in any other status)"
            % (", ".join(MESSAGE_STATUSES), value))
    return value


def _opt_name(kind: str, value: Any) -> Optional[str]:
    """An optional queue / partition name: ``None`` stays ``None``, else :func:`validate_name`."""
    return None if value is None else validate_name(kind, value)


class _Page(TypedDict):
    limit: int
    offset: int


class _Window(TypedDict):
    from_: Optional[str]
    to: Optional[str]


def _page(limit: Any, offset: Any) -> _Page:
    """The ``limit`` (>= 1) and ``offset`` (>= 0) of a paged route."""
    return {"limit": _int_arg("limit", limit, 1), "offset": _int_arg("offset", offset, 0)}


def _window(from_: Optional[Timestamp], to: Optional[Timestamp]) -> _Window:
    """The ``from_`` / ``to`` window of a route, as the broker's text (``None``: not sent)."""
    return {
        "from_": None if from_ is None else iso_timestamp("from_", from_),
        "to": None if to is None else iso_timestamp("to", to),
    }


def _message_ids(partition_id: Any, transaction_id: Any) -> Tuple[str, str]:
    """A message's partition id and transaction id, both placed in a path: URL-safe as names."""
    return validate_name("partition id", partition_id), validate_name("transaction id", transaction_id)


# --------------------------------------------------------------------------- Admin


class Admin:
    """Admin calls of a Queen 0.15 broker; get it as ``Queen.admin`` (thread-safe, stateless).

    See the module docstring for the common error rules. Method names follow Queen's
    official client.
    """

    def __init__(self, requester: Requester) -> None:
        self._requester = requester

    def __repr__(self) -> str:
        return "Admin(%r)" % (self._requester,)

    # ------------------------------------------------------------------ resources

    def get_overview(self) -> Dict[str, Any]:
        """Broker-wide counts: ``{queues, partitions, namespaces, tasks, messages: {total,
        pending, processing, completed, failed, deadLetter}, lag, throughput, statsAge,
        timestamp}``. Wire: ``GET /api/v1/resources/overview``."""
        return wire_resources.overview(self._requester)

    def get_namespaces(self) -> Dict[str, Any]:
        """``{namespaces: [{namespace, queues, partitions, messages: {total, pending}}]}``.
        Wire: ``GET /api/v1/resources/namespaces``."""
        return wire_resources.namespaces(self._requester)

    def get_tasks(self) -> Dict[str, Any]:
        """``{tasks: [{task, queues, partitions, messages: {total, pending}}]}``.
        Wire: ``GET /api/v1/resources/tasks``."""
        return wire_resources.tasks(self._requester)

    def list_queues(self) -> Dict[str, Any]:
        """All queues, newest first: ``{queues: [{id, name, namespace, task, createdAt,
        partitions (count), messages: {total, pending, processing}}]}`` (a 0.15 broker takes
        no filters here; use :meth:`get_queue_stats` to filter and page).
        Wire: ``GET /api/v1/resources/queues``."""
        return wire_resources.queues(self._requester)

    def get_queue(self, name: str) -> Dict[str, Any]:
        """One queue: ``{id, name, namespace, task, createdAt, partitions: [{id, name,
        createdAt, newestMessage, oldestMessage, stats}], totals}`` (no options: see
        :meth:`get_queue_detail`). Raises BrokerError ``Queue not found``.
        Wire: ``GET /api/v1/resources/queues/{name}``."""
        validate_name("queue", name)
        return wire_resources.queue(self._requester, name)

    def get_partitions(self, queue: Optional[str] = None) -> Any:
        """Official-client parity only: a Queen 0.15 broker has no such route, so this raises
        :class:`RouteNotFoundError`. Wire: ``GET /api/v1/resources/partitions[?queue=]``."""
        return wire_resources.partitions(self._requester, _opt_name("queue", queue))

    def clear_queue(self, name: str, partition: Optional[str] = None) -> Any:
        """Official-client parity only: a Queen 0.15 broker has no such route, so this raises
        :class:`RouteNotFoundError` (delete and re-create the queue instead).
        Wire: ``DELETE /api/v1/queues/{name}/clear[?partition=]``."""
        validate_name("queue", name)
        return wire_resources.clear_queue(self._requester, name, _opt_name("partition", partition))

    # ------------------------------------------------------------------ messages

    def list_messages(
        self,
        *,
        queue: Optional[str] = None,
        partition: Optional[str] = None,
        namespace: Optional[str] = None,
        task: Optional[str] = None,
        status: Optional[str] = None,
        from_: Optional[Timestamp] = None,
        to: Optional[Timestamp] = None,
        limit: int = 200,
        offset: int = 0,
    ) -> Dict[str, Any]:
        """Stored messages, newest first, with their delivery status.

        Args:
            queue, partition, namespace, task: filters (``namespace`` is sent as ``ns``).
            status: ``pending``, ``processing``, ``completed`` or ``dead_letter`` (a message
                whose delivery failed is ``pending`` again until it is dead-lettered).
            from_, to: creation-time window (ISO-8601 or datetime); the broker's defaults are
                the last hour (``from`` an hour ago, ``to`` now), so older messages are listed
                only with an earlier ``from_``.
            limit: page size (>= 1, default 200); offset: rows to skip (>= 0).

        Returns:
            ``{messages: [{id, transactionId, partitionId, partition, queue, namespace, task,
            queuePath, queuePriority, createdAt, traceId, producerSub, leaseExpiresAt, status,
            queueStatus, busStatus: {consumedBy, totalGroups}}], mode: {type, busGroupsCount,
            hasQueueMode}}``.

        Raises:
            InvalidInputError: a bad name, an unknown ``status``, a bad timestamp, ``limit`` < 1
                or ``offset`` < 0 (nothing sent).

        Wire: ``GET /api/v1/messages?queue=&partition=&ns=&task=&status=&from=&to=&limit=&offset=``.
        """
        return wire_resources.messages(
            self._requester,
            queue=_opt_name("queue", queue),
            partition=_opt_name("partition", partition),
            namespace=_opt_str("namespace", namespace),
            task=_opt_str("task", task),
            status=_opt_status(status),
            **_window(from_, to),
            **_page(limit, offset),
        )

    def get_message(self, partition_id: str, transaction_id: str) -> Dict[str, Any]:
        """One message with payload and status: ``{id, transactionId, partitionId, partition,
        queue, namespace, task, queuePath, payload, traceId, producerSub, createdAt,
        isEncrypted, status, retryCount, errorMessage, leaseExpiresAt, consumerGroups:
        [{name, consumed, leaseExpiresAt}], mode, queueConfig}``. Raises BrokerError
        ``Message not found``. Wire: ``GET /api/v1/messages/{partitionId}/{transactionId}``."""
        return wire_resources.message(self._requester, *_message_ids(partition_id, transaction_id))

    def delete_message(self, partition_id: str, transaction_id: str) -> Dict[str, Any]:
        """Delete one stored message (ids validated URL-safe).

        Returns:
            the broker's reply ``{success: True, partitionId, transactionId, message:
            "Message deleted successfully"}`` (the ids echoed; no message id, no count).

        Raises:
            BrokerError: the broker refused it: ``.error`` ``"Message not found"`` (its
                ``{success: false, ..., message: "Message not found"}``), or a database error
                (e.g. a partition id that is not a UUID). InvalidInputError: a bad id
                (nothing sent).

        Wire: ``DELETE /api/v1/messages/{partitionId}/{transactionId}``."""
        return wire_resources.delete_message(self._requester, *_message_ids(partition_id, transaction_id))

    def retry_message(self, partition_id: str, transaction_id: str) -> Any:
        """Official-client parity only: a Queen 0.15 broker has no such route, so this raises
        :class:`RouteNotFoundError`. Wire: ``POST /api/v1/messages/{pid}/{tx}/retry``."""
        return wire_resources.retry_message(self._requester, *_message_ids(partition_id, transaction_id))

    def move_message_to_dlq(self, partition_id: str, transaction_id: str) -> Any:
        """Official-client parity only: a Queen 0.15 broker has no such route, so this raises
        :class:`RouteNotFoundError` (nack with status ``"dlq"`` instead).
        Wire: ``POST /api/v1/messages/{pid}/{tx}/dlq``."""
        return wire_resources.move_message_to_dlq(self._requester, *_message_ids(partition_id, transaction_id))

    # ------------------------------------------------------------------ status

    def get_status(self, *, from_: Optional[Timestamp] = None, to: Optional[Timestamp] = None) -> Dict[str, Any]:
        """Broker dashboard: ``{timeRange, bucketMinutes, pointCount, throughput: [...],
        queues: [...], messages: {...}, leases: {...}, deadLetterQueue: {...}, errors: {...},
        workers: [...], statsAge}``. Wire: ``GET /api/v1/status[?from=&to=]``."""
        return wire_admin.status(self._requester, **_window(from_, to))

    def get_queue_stats(
        self,
        *,
        namespace: Optional[str] = None,
        task: Optional[str] = None,
        from_: Optional[Timestamp] = None,
        to: Optional[Timestamp] = None,
        limit: int = 100,
        offset: int = 0,
    ) -> Dict[str, Any]:
        """Queues with counts, paged: ``{queues: [{id, name, namespace, task, createdAt,
        partitions, messages}], pagination: {limit, offset}}``.
        Wire: ``GET /api/v1/status/queues?namespace=&task=&from=&to=&limit=&offset=``."""
        return wire_admin.queue_stats(
            self._requester,
            namespace=_opt_str("namespace", namespace),
            task=_opt_str("task", task),
            **_page(limit, offset),
            **_window(from_, to),
        )

    def get_queue_detail(self, name: str) -> Dict[str, Any]:
        """One queue's status, including its options: ``{queue: {id, name, namespace, task,
        priority, createdAt, config: {leaseTime (s), retryLimit, retryDelay (ms), ttl (s),
        deadLetterQueue, maxQueueSize}}, partitions: [{id, name, createdAt, lastActivity,
        cursor: {totalConsumed, batchesConsumed}, messages, stats, ...}], totals}``. Raises
        BrokerError ``Queue not found``. Wire: ``GET /api/v1/status/queues/{name}``."""
        validate_name("queue", name)
        return wire_admin.queue_detail(self._requester, name)

    def get_queue_messages(
        self, name: str, *, partition: Optional[str] = None, limit: int = 50, offset: int = 0
    ) -> List[Dict[str, Any]]:
        """One queue's messages, newest first: ``[{id, transactionId, partitionId, partition,
        queue, queuePath, createdAt, status}]`` (``[]`` for an unknown queue), at most
        ``limit`` of them after skipping ``offset``, only ``partition``'s when given.

        A 0.15 broker applies neither ``limit`` nor ``partition`` on this route and answers
        any ``offset >= 1`` with no list at all, so the page is cut here from the first
        ``offset + limit`` rows it sends.

        Raises:
            InvalidInputError: a bad name, ``limit`` < 1 or ``offset`` < 0 (nothing sent).
            ProtocolError: the reply is not a list.

        Wire: ``GET /api/v1/status/queues/{name}/messages?partition=&limit=``."""
        validate_name("queue", name)
        part = _opt_name("partition", partition)
        page = _page(limit, offset)
        start, stop = page["offset"], page["offset"] + page["limit"]
        rows = wire_admin.queue_messages(self._requester, name, partition=part, limit=stop)
        if part is not None:
            rows = [r for r in rows if isinstance(r, dict) and r.get("partition") == part]
        return rows[start:stop]

    def get_analytics(
        self,
        *,
        from_: Optional[Timestamp] = None,
        to: Optional[Timestamp] = None,
        queue: Optional[str] = None,
        namespace: Optional[str] = None,
        task: Optional[str] = None,
        interval: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Message counts over time: ``{from, to, interval, dataPoints: [{timestamp,
        messages}]}`` (``interval`` e.g. ``"hour"``, the broker default; window default: the
        last 24 h). Wire: ``GET /api/v1/status/analytics?from=&to=&queue=&namespace=&task=&interval=``."""
        return wire_admin.analytics(
            self._requester,
            queue=_opt_name("queue", queue),
            namespace=_opt_str("namespace", namespace),
            task=_opt_str("task", task),
            interval=_opt_str("interval", interval),
            **_window(from_, to),
        )

    # ------------------------------------------------------------------ consumer groups

    def list_consumer_groups(self) -> List[Dict[str, Any]]:
        """Every (consumer group, queue) pair, queue mode included as ``__QUEUE_MODE__``:
        ``[{name, queueName, topics, members, state, totalLag, maxTimeLag (s),
        partitionsWithLag, subscriptionMode ("new" | "timestamp" | None),
        subscriptionTimestamp, subscriptionCreatedAt}]``. Wire: ``GET /api/v1/consumer-groups``."""
        return wire_groups.list_groups(self._requester)

    def get_consumer_group(self, name: str) -> Dict[str, Any]:
        """One group's position per queue: ``{queueName: {partitions: [{partition,
        totalConsumed, offsetLag, timeLagSeconds, lastConsumedAt, leaseActive, workerId}]}}``
        (``{}`` for an unknown group). A group named ``lagging`` cannot be read (the route
        is taken by :meth:`get_lagging_consumers`). Wire: ``GET /api/v1/consumer-groups/{name}``."""
        validate_name("consumer group", name)
        if name == "lagging":
            raise InvalidInputError("a consumer group named 'lagging' cannot be read: that path is the lagging route")
        return wire_groups.group(self._requester, name)

    def get_lagging_consumers(self, min_lag_seconds: int = 60) -> List[Dict[str, Any]]:
        """(group, partition) pairs whose oldest unconsumed message is more than
        ``min_lag_seconds`` **seconds** old (the broker compares whole seconds, rounded, and
        strictly), most lagging first: ``[{consumer_group,
        queue_name, partition_name, partition_id, worker_id, offset_lag, time_lag_seconds,
        lag_hours, oldest_unconsumed_at, last_consumed_at}]`` (snake_case, as the broker sends).
        Wire: ``GET /api/v1/consumer-groups/lagging?minLagSeconds=``."""
        return wire_groups.lagging(self._requester, _int_arg("min_lag_seconds", min_lag_seconds, 0))

    def refresh_consumer_stats(self) -> Dict[str, Any]:
        """Recompute the broker's statistics tables now: ``{queue: {queuesUpdated},
        namespace, task, system, partition: {...}, cleanup}``. Wire: ``POST /api/v1/stats/refresh``."""
        return wire_admin.refresh_stats(self._requester)

    def delete_consumer_group(self, group: str, delete_metadata: bool = True) -> Dict[str, Any]:
        """Same as :meth:`Queen.delete_consumer_group` (every queue)."""
        return delete_consumer_group(self._requester, group, delete_metadata)

    def delete_consumer_group_for_queue(self, group: str, queue: str, delete_metadata: bool = True) -> Dict[str, Any]:
        """Forget ``group``'s position (and, with ``delete_metadata``, its subscription) on one
        queue; its next pop starts like a new group. Returns ``{success, consumerGroup,
        queueName, deletedPartitions, metadataDeleted}``.
        Wire: ``DELETE /api/v1/consumer-groups/{group}/queues/{queue}?deleteMetadata=``."""
        return delete_consumer_group(self._requester, group, delete_metadata, queue=queue)

    def update_consumer_group_timestamp(self, group: str, timestamp: Timestamp) -> Dict[str, Any]:
        """Same as :meth:`Queen.update_consumer_group_timestamp`."""
        return update_consumer_group_timestamp(self._requester, group, timestamp)

    def seek_consumer_group(
        self,
        group: str,
        queue: str,
        options: Optional[Mapping[str, Any]] = None,
        *,
        to_end: bool = False,
        timestamp: Optional[Timestamp] = None,
    ) -> Dict[str, Any]:
        """Move ``group``'s cursor on every partition of ``queue``; see :func:`queen_sync.groups.seek`.

        ``options`` may be the official client's ``{"toEnd": True}`` or ``{"timestamp": iso}``;
        or use ``to_end=True`` / ``timestamp=...``. ``toEnd`` must be True or False (else
        InvalidInputError, nothing sent).
        """
        if options is not None:
            if not isinstance(options, Mapping):
                raise InvalidInputError("seek options must be {'toEnd': True} or {'timestamp': ts}, got %r" % (options,))
            unknown = set(options) - {"toEnd", "to_end", "timestamp"}
            if unknown:
                raise InvalidInputError("unknown seek option(s) %s" % sorted(map(str, unknown)))
            for key in ("toEnd", "to_end"):
                # a bool, not any truthy value: {"toEnd": "false"} skipped every message
                if options.get(key) is not None and _bool_arg("seek option %r" % key, options[key]):
                    to_end = True
            if options.get("timestamp") is not None:
                timestamp = options["timestamp"]
        return seek(self._requester, group, queue, to_end=to_end, timestamp=timestamp)

    def seek_partition_to_end(self, group: str, queue: str, partition: str) -> Dict[str, Any]:
        """Skip ``group`` past every current message of one partition; see
        :func:`queen_sync.groups.seek_partition_to_end`."""
        return seek_partition_to_end(self._requester, group, queue, partition)

    # ------------------------------------------------------------------ traces

    def get_traces_by_name(self, name: str, *, limit: int = 100, offset: int = 0) -> Dict[str, Any]:
        """Traces recorded under trace name ``name`` (any text; URL-encoded, the broker
        decodes this path segment), newest first: ``{traces: [{id, event_type, data,
        consumer_group, trace_names, worker_id, created_at, transaction_id, partition_id,
        queue_name, partition_name, ...}], total, pagination: {limit, offset}}``.

        Paged here: a 0.15 broker sends every trace of the name for any ``limit`` (it pages
        one aggregated row) and ``traces: null`` for an ``offset`` >= 1, so the call asks
        for the first page and this slices it.
        Wire: ``GET /api/v1/traces/by-name/{name}?limit=&offset=0``."""
        _str_arg("trace name", name)
        page = _page(limit, offset)
        doc = wire_traces.by_name(self._requester, name, limit=page["limit"], offset=0)
        traces = doc.get("traces") or []
        out = dict(doc)
        out["traces"] = traces[page["offset"]:page["offset"] + page["limit"]]
        out["pagination"] = dict(page)
        return out

    def get_trace_names(self, *, limit: int = 50, offset: int = 0) -> Dict[str, Any]:
        """Known trace names: ``{trace_names: [{trace_name, trace_count, message_count,
        last_seen}], total, pagination: {limit, offset}}``.
        Wire: ``GET /api/v1/traces/names?limit=&offset=``."""
        return wire_traces.names(self._requester, **_page(limit, offset))

    def get_traces_for_message(self, partition_id: str, transaction_id: str) -> Dict[str, Any]:
        """Traces of one message, oldest first: ``{traces: [{id, event_type, data,
        consumer_group, trace_names, worker_id, created_at}]}``.
        Wire: ``GET /api/v1/traces/{partitionId}/{transactionId}``."""
        return wire_traces.for_message(self._requester, *_message_ids(partition_id, transaction_id))

    # ------------------------------------------------------------------ system

    def health(self) -> Dict[str, Any]:
        """``{status: "healthy" | "unhealthy", database, server, worker_id, version,
        shared_state, queen}``. An unhealthy broker answers 503; its body is returned, not
        raised (and not retried). Wire: ``GET /health``."""
        try:
            return wire_admin.health(self._requester)
        except QueenHTTPError as exc:
            if exc.status == 503 and isinstance(exc.body, dict) and "status" in exc.body:
                return exc.body
            raise

    def metrics(self) -> Dict[str, Any]:
        """The broker's JSON metrics stub: ``{uptime (s), requests, messages, database:
        {poolSize, idleConnections, waitingRequests}, memory, cpu}``. Wire: ``GET /metrics``."""
        return wire_admin.metrics(self._requester)

    def get_system_metrics(
        self,
        *,
        from_: Optional[Timestamp] = None,
        to: Optional[Timestamp] = None,
        hostname: Optional[str] = None,
        worker_id: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Per-replica CPU / memory / DB-pool time series: ``{timeRange, bucketMinutes,
        pointCount, replicaCount, replicas: [{hostname, port, workerId, timeSeries}]}``.
        Wire: ``GET /api/v1/analytics/system-metrics?from=&to=&hostname=&workerId=``."""
        return wire_admin.replica_series(
            self._requester,
            "system-metrics",
            what="admin.get_system_metrics()",
            hostname=hostname,
            worker_id=worker_id,
            **_window(from_, to),
        )

    def get_worker_metrics(
        self,
        *,
        from_: Optional[Timestamp] = None,
        to: Optional[Timestamp] = None,
        hostname: Optional[str] = None,
        worker_id: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Per-worker request counters: ``{timeRange, bucketMinutes, pointCount, timeSeries,
        queues, workers, summary}``.
        Wire: ``GET /api/v1/analytics/worker-metrics?from=&to=&hostname=&workerId=``."""
        return wire_admin.replica_series(
            self._requester,
            "worker-metrics",
            what="admin.get_worker_metrics()",
            hostname=hostname,
            worker_id=worker_id,
            **_window(from_, to),
        )

    def get_postgres_stats(self) -> Dict[str, Any]:
        """PostgreSQL statistics: ``{database, timestamp, bufferConfig, cacheSummary,
        databaseCache, activeQueries, autovacuumStatus, bufferUsage, deadTuples, hotUpdates,
        indexCache, tableCache, tableSizes}``. Wire: ``GET /api/v1/analytics/postgres-stats``."""
        return wire_admin.postgres_stats(self._requester)

    def get_maintenance_mode(self) -> Dict[str, Any]:
        """Push maintenance state: ``{maintenanceMode, popMaintenanceMode, bufferedMessages,
        bufferHealthy, bufferStats}``. Wire: ``GET /api/v1/system/maintenance``."""
        return wire_admin.maintenance(self._requester)

    def set_maintenance_mode(self, enabled: bool) -> Dict[str, Any]:
        """Switch push maintenance on (pushes are buffered by the broker, answered
        ``buffered``) or off (the buffer is written). Returns ``{maintenanceMode,
        bufferedMessages, bufferHealthy, message}``.
        Wire: ``POST /api/v1/system/maintenance`` ``{"enabled": bool}`` (ADMIN)."""
        return wire_admin.set_maintenance(self._requester, _bool_arg("enabled", enabled))

    def get_pop_maintenance_mode(self) -> Dict[str, Any]:
        """``{popMaintenanceMode, message}``. Wire: ``GET /api/v1/system/maintenance/pop``."""
        return wire_admin.pop_maintenance(self._requester)

    def set_pop_maintenance_mode(self, enabled: bool) -> Dict[str, Any]:
        """Switch pop maintenance on (every pop answers 204, which ``pop()`` returns as ``[]``)
        or off. Returns ``{popMaintenanceMode, message}``.
        Wire: ``POST /api/v1/system/maintenance/pop`` ``{"enabled": bool}`` (ADMIN)."""
        return wire_admin.set_pop_maintenance(self._requester, _bool_arg("enabled", enabled))


