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
"""

# mypy: no-warn-return-any
# (methods return the broker's decoded JSON body, typed Any by ``call``, as the documented
# dict / list shape of a real 0.15 broker; they pass it on unchanged)

from __future__ import annotations

import datetime as _dt
import logging
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Union
from urllib.parse import quote

from . import codec
from ._validate import bool_arg as _bool_arg
from ._validate import int_arg as _int_arg
from ._validate import timestamp_arg
from .builders import QUEUE_OPTION_DEFAULTS, validate_name
from .errors import BrokerError, InvalidInputError, ProtocolError, QueenHTTPError, RouteNotFoundError

if TYPE_CHECKING:  # pragma: no cover
    from .client import Queen

__all__ = [
    "Admin",
    "iso_timestamp",
    "update_queue_config",
    "remember_queue_options",
    "forget_queue_options",
    "READABLE_QUEUE_OPTIONS",
    "UNREADABLE_QUEUE_OPTIONS",
]

log = logging.getLogger("queen_sync.admin")

Timestamp = Union[str, _dt.datetime]
JSON = Any

#: Routes the official clients call that a Queen 0.15 broker does not have (method, path prefix → method name).
_MISSING_ROUTE_HINTS = {
    ("GET", "/api/v1/resources/partitions"): "admin.get_partitions()",
    ("DELETE", "/api/v1/queues/"): "admin.clear_queue()",
    ("POST", "/api/v1/messages/"): "admin.retry_message() / admin.move_message_to_dlq()",
}


# --------------------------------------------------------------------------- shared helpers


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


def _str_arg(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError("%s must be a non-empty str, got %r" % (name, value))
    return value


def _opt_str(name: str, value: Any) -> Optional[str]:
    """An optional filter: ``None`` stays ``None`` (not sent), else a non-empty str."""
    return None if value is None else _str_arg(name, value)


def _opt_name(kind: str, value: Any) -> Optional[str]:
    """An optional queue / partition name: ``None`` stays ``None``, else :func:`validate_name`."""
    return None if value is None else validate_name(kind, value)


def _page(limit: Any, offset: Any) -> Dict[str, int]:
    """The ``limit`` (>= 1) and ``offset`` (>= 0) query parameters of a paged route."""
    return {"limit": _int_arg("limit", limit, 1), "offset": _int_arg("offset", offset, 0)}


def _query(**params: Any) -> Dict[str, str]:
    """Drop ``None`` values and stringify the rest (bools as ``true``/``false``)."""
    out: Dict[str, str] = {}
    for k, v in params.items():
        if v is None:
            continue
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        else:
            out[k] = str(v)
    return out


def check_reply(doc: Any, what: str, status: int) -> Any:
    """Raise :class:`BrokerError` for a 200 body carrying ``error`` or ``success: false``."""
    if isinstance(doc, dict) and (doc.get("error") is not None or doc.get("success") is False):
        err = doc.get("error")
        raise BrokerError("%s refused by the broker: %s" % (what, err), status=status, error=err, body=doc)
    return doc


def call(
    client: "Queen",
    method: str,
    path: str,
    *,
    what: str,
    query: Optional[Mapping[str, str]] = None,
    body: Any = None,
    idempotent: Optional[bool] = None,
) -> Any:
    """Send one admin call and return its checked, decoded JSON body.

    ``body`` (a JSON-able object) is encoded by the codec; a POST without one sends ``{}``.
    ``idempotent`` defaults to True for GET and DELETE, False for POST.

    Raises:
        RouteNotFoundError: the broker has no such route (names ``method path``).
        BrokerError: the body carries ``error`` / ``success: false``.
        ProtocolError: the body is not JSON.
    """
    if idempotent is None:
        idempotent = method != "POST"
    raw = codec.encode_json(body) if body is not None else None
    try:
        resp = client._request(method, path, body=raw, query=query or None, idempotent=idempotent)
    except RouteNotFoundError as exc:
        raise _route_not_found(method, path, what, exc) from None
    if resp.status == 204 or not resp.data:
        return None
    return check_reply(codec.decode_json(resp.data), what, resp.status)


def _route_not_found(method: str, path: str, what: str, exc: RouteNotFoundError) -> RouteNotFoundError:
    hint = ""
    for (m, prefix), name in _MISSING_ROUTE_HINTS.items():
        if m == method and path.startswith(prefix):
            hint = "; a Queen 0.15 broker does not offer %s" % name
            break
    return RouteNotFoundError(
        "%s: %s %s: the Queen broker has no such route (HTTP 404)%s" % (what, method, path, hint),
        status=exc.status,
        error=exc.error,
        body=exc.body,
    )


def _path_id(kind: str, value: Any) -> str:
    """A partition id / transaction id placed in a path: same URL-safe rule as names."""
    return validate_name(kind, value)


def _message_path(partition_id: Any, transaction_id: Any) -> str:
    """``{partitionId}/{transactionId}`` of a message route, both checked by :func:`_path_id`."""
    return "%s/%s" % (_path_id("partition id", partition_id), _path_id("transaction id", transaction_id))


# --------------------------------------------------------------------------- queue config merge

#: Options ``GET /api/v1/status/queues/{q}`` reports (wire option → key under ``queue.config``,
#: or ``queue.priority``). The other 8 options a 0.15 broker never reports.
READABLE_QUEUE_OPTIONS: Dict[str, str] = {
    "leaseTime": "leaseTime",
    "retryLimit": "retryLimit",
    "retryDelay": "retryDelay",
    "ttl": "ttl",
    "deadLetterQueue": "deadLetterQueue",
    "maxSize": "maxQueueSize",
    "priority": "priority",
}

#: Options a 0.15 broker accepts on configure but never reports back (outside the configure reply).
UNREADABLE_QUEUE_OPTIONS = tuple(k for k in QUEUE_OPTION_DEFAULTS if k not in READABLE_QUEUE_OPTIONS)


def _known_options(client: "Queen") -> Dict[str, Dict[str, Any]]:
    cache: Optional[Dict[str, Dict[str, Any]]] = client.__dict__.get("_queen_sync_queue_options")
    if cache is None:
        cache = client.__dict__.setdefault("_queen_sync_queue_options", {})
    return cache


def remember_queue_options(client: "Queen", reply: Any) -> None:
    """Record the options echoed by a configure reply (used by :func:`update_queue_config`)."""
    if isinstance(reply, dict) and isinstance(reply.get("queue"), str) and isinstance(reply.get("options"), dict):
        _known_options(client)[reply["queue"]] = dict(reply["options"])


def forget_queue_options(client: "Queen", queue: str) -> None:
    """Drop what :func:`remember_queue_options` recorded for ``queue`` (after a delete)."""
    _known_options(client).pop(queue, None)


def update_queue_config(
    client: "Queen",
    queue: str,
    changes: Mapping[str, Any],
    namespace: Optional[str] = None,
    task: Optional[str] = None,
) -> Dict[str, Any]:
    """Change some options of ``queue`` and keep the others (see :meth:`QueueBuilder.update_config`).

    Steps: ``GET /api/v1/status/queues/{q}`` (the only 0.15 route reporting a queue's
    options, namespace and task), merge, then ``POST /api/v1/configure`` with all 15 options.

    The options a 0.15 broker never reports (:data:`UNREADABLE_QUEUE_OPTIONS`:
    ``dlqAfterMaxRetries, delayedProcessing, windowBuffer, retentionSeconds,
    completedRetentionSeconds, retentionEnabled, encryptionEnabled, maxWaitTimeSeconds``) are
    taken from ``changes``, else from the last configure reply **this client** saw for the
    queue, else reset to the broker defaults (logged as a warning).

    Returns:
        the configure reply ``{configured, queue, queueId, partitionId, namespace, task, options}``.

    Raises:
        BrokerError: the broker refused the status read (other than ``Queue not found``) or
            the configure.
        ProtocolError: a reply has an unexpected shape (the configure reply is not an object).
    """
    from .builders import QueueBuilder  # the builder validates and normalises option keys

    validated = QueueBuilder(client, queue).config(changes)._config
    merged: Dict[str, Any] = dict(QUEUE_OPTION_DEFAULTS)
    ns, tk = namespace, task
    try:
        detail = call(client, "GET", "/api/v1/status/queues/%s" % queue, what="read of queue %r" % queue)
    except BrokerError as exc:
        if exc.error != "Queue not found" or isinstance(exc, QueenHTTPError):
            raise
        detail = None
    remembered = _known_options(client).get(queue, {})
    if detail is not None:
        qd = detail.get("queue") if isinstance(detail, dict) else None
        if not isinstance(qd, dict):
            raise ProtocolError("queue status reply has no 'queue' object")
        raw_cfg = qd.get("config")
        cfg = raw_cfg if isinstance(raw_cfg, dict) else {}
        for opt in UNREADABLE_QUEUE_OPTIONS:
            if opt in remembered:
                merged[opt] = remembered[opt]
        for opt, key in READABLE_QUEUE_OPTIONS.items():
            src = qd if opt == "priority" else cfg
            if src.get(key) is not None:
                merged[opt] = src[key]
        if ns is None and isinstance(qd.get("namespace"), str):
            ns = qd["namespace"]
        if tk is None and isinstance(qd.get("task"), str):
            tk = qd["task"]
        reset = [o for o in UNREADABLE_QUEUE_OPTIONS if o not in validated and o not in remembered]
        if reset:
            log.warning(
                "update_config(%r): a Queen 0.15 broker does not report %s; they are sent as the "
                "broker defaults (pass them to update_config() to keep other values)",
                queue,
                ", ".join(reset),
            )
    merged.update(validated)
    body: Dict[str, Any] = {"queue": queue}
    if ns:
        body["namespace"] = ns
    if tk:
        body["task"] = tk
    body["options"] = merged
    reply = call(client, "POST", "/api/v1/configure", body=body, what="configure of queue %r" % queue, idempotent=True)
    if not isinstance(reply, dict):  # a Queen broker always answers a JSON object here
        raise ProtocolError("configure of queue %r: the reply is not a JSON object" % queue)
    remember_queue_options(client, reply)
    return reply


# --------------------------------------------------------------------------- Admin


class Admin:
    """Admin calls of a Queen 0.15 broker; get it as ``Queen.admin`` (thread-safe, stateless).

    See the module docstring for the common error rules. Method names follow Queen's
    official client.
    """

    def __init__(self, client: "Queen") -> None:
        self._client = client

    def __repr__(self) -> str:
        return "Admin(%r)" % (self._client,)

    def _get(self, path: str, what: str, **params: Any) -> JSON:
        return call(self._client, "GET", path, what=what, query=_query(**params))

    def _analytics(
        self,
        route: str,
        what: str,
        from_: Optional[Timestamp],
        to: Optional[Timestamp],
        hostname: Optional[str],
        worker_id: Optional[str],
    ) -> JSON:
        """``GET /api/v1/analytics/{route}?hostname=&workerId=&from=&to=`` (replica time series)."""
        path = "/api/v1/analytics/" + route
        return self._get(path, what, hostname=hostname, workerId=worker_id, **_window(from_, to))

    def _set_enabled(self, path: str, what: str, enabled: Any) -> JSON:
        """``POST path {"enabled": bool}`` (a maintenance switch; safe to resend)."""
        return call(
            self._client, "POST", path, body={"enabled": _bool_arg("enabled", enabled)}, what=what, idempotent=True
        )

    # ------------------------------------------------------------------ resources

    def get_overview(self) -> Dict[str, Any]:
        """Broker-wide counts: ``{queues, partitions, namespaces, tasks, messages: {total,
        pending, processing, completed, failed, deadLetter}, lag, throughput, statsAge,
        timestamp}``. Wire: ``GET /api/v1/resources/overview``."""
        return self._get("/api/v1/resources/overview", "admin.get_overview()")

    def get_namespaces(self) -> Dict[str, Any]:
        """``{namespaces: [{namespace, queues, partitions, messages: {total, pending}}]}``.
        Wire: ``GET /api/v1/resources/namespaces``."""
        return self._get("/api/v1/resources/namespaces", "admin.get_namespaces()")

    def get_tasks(self) -> Dict[str, Any]:
        """``{tasks: [{task, queues, partitions, messages: {total, pending}}]}``.
        Wire: ``GET /api/v1/resources/tasks``."""
        return self._get("/api/v1/resources/tasks", "admin.get_tasks()")

    def list_queues(self) -> Dict[str, Any]:
        """All queues, newest first: ``{queues: [{id, name, namespace, task, createdAt,
        partitions (count), messages: {total, pending, processing}}]}`` (a 0.15 broker takes
        no filters here; use :meth:`get_queue_stats` to filter and page).
        Wire: ``GET /api/v1/resources/queues``."""
        return self._get("/api/v1/resources/queues", "admin.list_queues()")

    def get_queue(self, name: str) -> Dict[str, Any]:
        """One queue: ``{id, name, namespace, task, createdAt, partitions: [{id, name,
        createdAt, newestMessage, oldestMessage, stats}], totals}`` (no options: see
        :meth:`get_queue_detail`). Raises BrokerError ``Queue not found``.
        Wire: ``GET /api/v1/resources/queues/{name}``."""
        validate_name("queue", name)
        return self._get("/api/v1/resources/queues/%s" % name, "admin.get_queue(%r)" % name)

    def get_partitions(self, queue: Optional[str] = None) -> Any:
        """Official-client parity only: a Queen 0.15 broker has no such route, so this raises
        :class:`RouteNotFoundError`. Wire: ``GET /api/v1/resources/partitions[?queue=]``."""
        return self._get("/api/v1/resources/partitions", "admin.get_partitions()", queue=_opt_name("queue", queue))

    def clear_queue(self, name: str, partition: Optional[str] = None) -> Any:
        """Official-client parity only: a Queen 0.15 broker has no such route, so this raises
        :class:`RouteNotFoundError` (delete and re-create the queue instead).
        Wire: ``DELETE /api/v1/queues/{name}/clear[?partition=]``."""
        validate_name("queue", name)
        return call(
            self._client,
            "DELETE",
            "/api/v1/queues/%s/clear" % name,
            what="admin.clear_queue(%r)" % name,
            query=_query(partition=_opt_name("partition", partition)),
        )

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
            status: ``pending``, ``processing``, ``completed``, ``failed`` or ``dead_letter``.
            from_, to: creation-time window (ISO-8601 or datetime).
            limit: page size (>= 1, default 200); offset: rows to skip (>= 0).

        Returns:
            ``{messages: [{id, transactionId, partitionId, partition, queue, namespace, task,
            queuePath, queuePriority, createdAt, traceId, producerSub, leaseExpiresAt, status,
            queueStatus, busStatus: {consumedBy, totalGroups}}], mode: {type, busGroupsCount,
            hasQueueMode}}``.

        Wire: ``GET /api/v1/messages?queue=&partition=&ns=&task=&status=&from=&to=&limit=&offset=``.
        """
        return self._get(
            "/api/v1/messages",
            "admin.list_messages()",
            queue=_opt_name("queue", queue),
            partition=_opt_name("partition", partition),
            ns=_opt_str("namespace", namespace),
            task=_opt_str("task", task),
            status=_opt_str("status", status),
            **_window(from_, to),
            **_page(limit, offset),
        )

    def get_message(self, partition_id: str, transaction_id: str) -> Dict[str, Any]:
        """One message with payload and status: ``{id, transactionId, partitionId, partition,
        queue, namespace, task, queuePath, payload, traceId, producerSub, createdAt,
        isEncrypted, status, retryCount, errorMessage, leaseExpiresAt, consumerGroups:
        [{name, consumed, leaseExpiresAt}], mode, queueConfig}``. Raises BrokerError
        ``Message not found``. Wire: ``GET /api/v1/messages/{partitionId}/{transactionId}``."""
        return self._get("/api/v1/messages/%s" % _message_path(partition_id, transaction_id), "admin.get_message()")

    def delete_message(self, partition_id: str, transaction_id: str) -> Dict[str, Any]:
        """Delete one stored message: ``{success: True, deleted: True, messageId,
        transactionId, partitionId}``. Raises BrokerError ``Message not found``.
        Wire: ``DELETE /api/v1/messages/{partitionId}/{transactionId}``."""
        path = "/api/v1/messages/%s" % _message_path(partition_id, transaction_id)
        return call(self._client, "DELETE", path, what="admin.delete_message()")

    def retry_message(self, partition_id: str, transaction_id: str) -> Any:
        """Official-client parity only: a Queen 0.15 broker has no such route, so this raises
        :class:`RouteNotFoundError`. Wire: ``POST /api/v1/messages/{pid}/{tx}/retry``."""
        path = "/api/v1/messages/%s/retry" % _message_path(partition_id, transaction_id)
        return call(self._client, "POST", path, what="admin.retry_message()")

    def move_message_to_dlq(self, partition_id: str, transaction_id: str) -> Any:
        """Official-client parity only: a Queen 0.15 broker has no such route, so this raises
        :class:`RouteNotFoundError` (nack with status ``"dlq"`` instead).
        Wire: ``POST /api/v1/messages/{pid}/{tx}/dlq``."""
        path = "/api/v1/messages/%s/dlq" % _message_path(partition_id, transaction_id)
        return call(self._client, "POST", path, what="admin.move_message_to_dlq()")

    # ------------------------------------------------------------------ status

    def get_status(self, *, from_: Optional[Timestamp] = None, to: Optional[Timestamp] = None) -> Dict[str, Any]:
        """Broker dashboard: ``{timeRange, bucketMinutes, pointCount, throughput: [...],
        queues: [...], messages: {...}, leases: {...}, deadLetterQueue: {...}, errors: {...},
        workers: [...], statsAge}``. Wire: ``GET /api/v1/status[?from=&to=]``."""
        return self._get("/api/v1/status", "admin.get_status()", **_window(from_, to))

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
        return self._get(
            "/api/v1/status/queues",
            "admin.get_queue_stats()",
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
        return self._get("/api/v1/status/queues/%s" % name, "admin.get_queue_detail(%r)" % name)

    def get_queue_messages(
        self, name: str, *, partition: Optional[str] = None, limit: int = 50, offset: int = 0
    ) -> List[Dict[str, Any]]:
        """One queue's messages, newest first: ``[{id, transactionId, partitionId, partition,
        queue, queuePath, createdAt, status}]`` (``[]`` for an unknown queue).
        Wire: ``GET /api/v1/status/queues/{name}/messages?partition=&limit=&offset=``."""
        validate_name("queue", name)
        return self._get(
            "/api/v1/status/queues/%s/messages" % name,
            "admin.get_queue_messages(%r)" % name,
            partition=_opt_name("partition", partition),
            **_page(limit, offset),
        )

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
        return self._get(
            "/api/v1/status/analytics",
            "admin.get_analytics()",
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
        return self._get("/api/v1/consumer-groups", "admin.list_consumer_groups()")

    def get_consumer_group(self, name: str) -> Dict[str, Any]:
        """One group's position per queue: ``{queueName: {partitions: [{partition,
        totalConsumed, offsetLag, timeLagSeconds, lastConsumedAt, leaseActive, workerId}]}}``
        (``{}`` for an unknown group). A group named ``lagging`` cannot be read (the route
        is taken by :meth:`get_lagging_consumers`). Wire: ``GET /api/v1/consumer-groups/{name}``."""
        validate_name("consumer group", name)
        if name == "lagging":
            raise InvalidInputError("a consumer group named 'lagging' cannot be read: that path is the lagging route")
        return self._get("/api/v1/consumer-groups/%s" % name, "admin.get_consumer_group(%r)" % name)

    def get_lagging_consumers(self, min_lag_seconds: int = 60) -> List[Dict[str, Any]]:
        """(group, partition) pairs whose oldest unconsumed message is at least
        ``min_lag_seconds`` **seconds** old, most lagging first: ``[{consumer_group,
        queue_name, partition_name, partition_id, worker_id, offset_lag, time_lag_seconds,
        lag_hours, oldest_unconsumed_at, last_consumed_at}]`` (snake_case, as the broker sends).
        Wire: ``GET /api/v1/consumer-groups/lagging?minLagSeconds=``."""
        return self._get(
            "/api/v1/consumer-groups/lagging",
            "admin.get_lagging_consumers()",
            minLagSeconds=_int_arg("min_lag_seconds", min_lag_seconds, 0),
        )

    def refresh_consumer_stats(self) -> Dict[str, Any]:
        """Recompute the broker's statistics tables now: ``{queue: {queuesUpdated},
        namespace, task, system, partition: {...}, cleanup}``. Wire: ``POST /api/v1/stats/refresh``."""
        return call(self._client, "POST", "/api/v1/stats/refresh", what="admin.refresh_consumer_stats()")

    def delete_consumer_group(self, group: str, delete_metadata: bool = True) -> Dict[str, Any]:
        """Same as :meth:`Queen.delete_consumer_group` (every queue)."""
        from .groups import delete_consumer_group

        return delete_consumer_group(self._client, group, delete_metadata)

    def delete_consumer_group_for_queue(self, group: str, queue: str, delete_metadata: bool = True) -> Dict[str, Any]:
        """Forget ``group``'s position (and, with ``delete_metadata``, its subscription) on one
        queue; its next pop starts like a new group. Returns ``{success, consumerGroup,
        queueName, deletedPartitions, metadataDeleted}``.
        Wire: ``DELETE /api/v1/consumer-groups/{group}/queues/{queue}?deleteMetadata=``."""
        from .groups import delete_consumer_group

        return delete_consumer_group(self._client, group, delete_metadata, queue=queue)

    def update_consumer_group_timestamp(self, group: str, timestamp: Timestamp) -> Dict[str, Any]:
        """Same as :meth:`Queen.update_consumer_group_timestamp`."""
        from .groups import update_consumer_group_timestamp

        return update_consumer_group_timestamp(self._client, group, timestamp)

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
        or use ``to_end=True`` / ``timestamp=...``.
        """
        from .groups import seek

        if options is not None:
            if not isinstance(options, Mapping):
                raise InvalidInputError("seek options must be {'toEnd': True} or {'timestamp': ts}, got %r" % (options,))
            unknown = set(options) - {"toEnd", "to_end", "timestamp"}
            if unknown:
                raise InvalidInputError("unknown seek option(s) %s" % sorted(map(str, unknown)))
            to_end = bool(options.get("toEnd") or options.get("to_end") or to_end)
            if options.get("timestamp") is not None:
                timestamp = options["timestamp"]
        return seek(self._client, group, queue, to_end=to_end, timestamp=timestamp)

    def seek_partition_to_end(self, group: str, queue: str, partition: str) -> Dict[str, Any]:
        """Skip ``group`` past every current message of one partition; see
        :func:`queen_sync.groups.seek_partition_to_end`."""
        from .groups import seek_partition_to_end

        return seek_partition_to_end(self._client, group, queue, partition)

    # ------------------------------------------------------------------ traces

    def get_traces_by_name(self, name: str, *, limit: int = 100, offset: int = 0) -> Dict[str, Any]:
        """Traces recorded under trace name ``name`` (any text; URL-encoded, the broker
        decodes this path segment), newest first: ``{traces: [{id, event_type, data,
        consumer_group, trace_names, worker_id, created_at, transaction_id, partition_id,
        queue_name, partition_name, ...}], total, pagination}``.
        Wire: ``GET /api/v1/traces/by-name/{name}?limit=&offset=``."""
        _str_arg("trace name", name)
        return self._get(
            "/api/v1/traces/by-name/%s" % quote(name, safe=""),
            "admin.get_traces_by_name(%r)" % name,
            **_page(limit, offset),
        )

    def get_trace_names(self, *, limit: int = 50, offset: int = 0) -> Dict[str, Any]:
        """Known trace names: ``{trace_names: [{trace_name, trace_count, message_count,
        last_seen}], total, pagination: {limit, offset}}``.
        Wire: ``GET /api/v1/traces/names?limit=&offset=``."""
        return self._get(
            "/api/v1/traces/names",
            "admin.get_trace_names()",
            **_page(limit, offset),
        )

    def get_traces_for_message(self, partition_id: str, transaction_id: str) -> Dict[str, Any]:
        """Traces of one message, oldest first: ``{traces: [{id, event_type, data,
        consumer_group, trace_names, worker_id, created_at}]}``.
        Wire: ``GET /api/v1/traces/{partitionId}/{transactionId}``."""
        path = "/api/v1/traces/%s" % _message_path(partition_id, transaction_id)
        return self._get(path, "admin.get_traces_for_message()")

    # ------------------------------------------------------------------ system

    def health(self) -> Dict[str, Any]:
        """``{status: "healthy" | "unhealthy", database, server, worker_id, version,
        shared_state, queen}``. An unhealthy broker answers 503; its body is returned, not
        raised (and not retried). Wire: ``GET /health``."""
        try:
            return call(self._client, "GET", "/health", what="admin.health()", idempotent=False)
        except QueenHTTPError as exc:
            if exc.status == 503 and isinstance(exc.body, dict) and "status" in exc.body:
                return exc.body
            raise

    def metrics(self) -> Dict[str, Any]:
        """The broker's JSON metrics stub: ``{uptime (s), requests, messages, database:
        {poolSize, idleConnections, waitingRequests}, memory, cpu}``. Wire: ``GET /metrics``."""
        return self._get("/metrics", "admin.metrics()")

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
        return self._analytics("system-metrics", "admin.get_system_metrics()", from_, to, hostname, worker_id)

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
        return self._analytics("worker-metrics", "admin.get_worker_metrics()", from_, to, hostname, worker_id)

    def get_postgres_stats(self) -> Dict[str, Any]:
        """PostgreSQL statistics: ``{database, timestamp, bufferConfig, cacheSummary,
        databaseCache, activeQueries, autovacuumStatus, bufferUsage, deadTuples, hotUpdates,
        indexCache, tableCache, tableSizes}``. Wire: ``GET /api/v1/analytics/postgres-stats``."""
        return self._get("/api/v1/analytics/postgres-stats", "admin.get_postgres_stats()")

    def get_maintenance_mode(self) -> Dict[str, Any]:
        """Push maintenance state: ``{maintenanceMode, popMaintenanceMode, bufferedMessages,
        bufferHealthy, bufferStats}``. Wire: ``GET /api/v1/system/maintenance``."""
        return self._get("/api/v1/system/maintenance", "admin.get_maintenance_mode()")

    def set_maintenance_mode(self, enabled: bool) -> Dict[str, Any]:
        """Switch push maintenance on (pushes are buffered by the broker, answered
        ``buffered``) or off (the buffer is written). Returns ``{maintenanceMode,
        bufferedMessages, bufferHealthy, message}``.
        Wire: ``POST /api/v1/system/maintenance`` ``{"enabled": bool}`` (ADMIN)."""
        return self._set_enabled("/api/v1/system/maintenance", "admin.set_maintenance_mode()", enabled)

    def get_pop_maintenance_mode(self) -> Dict[str, Any]:
        """``{popMaintenanceMode, message}``. Wire: ``GET /api/v1/system/maintenance/pop``."""
        return self._get("/api/v1/system/maintenance/pop", "admin.get_pop_maintenance_mode()")

    def set_pop_maintenance_mode(self, enabled: bool) -> Dict[str, Any]:
        """Switch pop maintenance on (every pop answers 204, which ``pop()`` returns as ``[]``)
        or off. Returns ``{popMaintenanceMode, message}``.
        Wire: ``POST /api/v1/system/maintenance/pop`` ``{"enabled": bool}`` (ADMIN)."""
        return self._set_enabled("/api/v1/system/maintenance/pop", "admin.set_pop_maintenance_mode()", enabled)


def _window(from_: Optional[Timestamp], to: Optional[Timestamp]) -> Dict[str, Optional[str]]:
    return {
        "from": None if from_ is None else iso_timestamp("from_", from_),
        "to": None if to is None else iso_timestamp("to", to),
    }
