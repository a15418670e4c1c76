"""Fluent, blocking builders: :class:`QueueBuilder` (create / delete / push / pop / consume)
and :class:`TransactionBuilder` (atomic pushes + acks).

Every setter of :class:`QueueBuilder` returns a **new** builder (the original is unchanged),
so a builder can be kept and reused, even from several threads::

    orders = q.queue("orders")
    orders.partition("acme").push({"data": {"id": 1}})      # orders itself has no partition
    msgs = orders.group("billing").batch(10).wait(True).pop()

Names of queues, partitions and consumer groups must be non-empty strings of URL-safe
characters ``[A-Za-z0-9._~-]`` (not ``"."`` nor ``".."``): a 0.15 broker does not URL-decode
paths. Bad input raises :class:`InvalidInputError` before anything is sent.
"""

from __future__ import annotations

import copy
import datetime as _dt
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Union, overload

from . import codec
from ._validate import bool_arg as _bool_arg
from ._validate import int_arg as _int_arg
from ._validate import timestamp_arg
from .errors import (
    BrokerError,
    ClientClosedError,
    InvalidInputError,
    ProtocolError,
    QueenConnectionError,
    QueenHTTPError,
    TransactionError,
)

if TYPE_CHECKING:  # pragma: no cover
    from .client import Queen
    from .consumer import ConsumeResult, Consumer
    from .dlq import DLQBuilder

__all__ = [
    "QueueBuilder",
    "TransactionBuilder",
    "TransactionQueueBuilder",
    "PopSpec",
    "execute_pop",
    "validate_name",
    "validate_path_token",
    "resolve_group",
    "group_from_context",
    "QUEUE_OPTIONS",
    "QUEUE_OPTION_DEFAULTS",
]

Message = Dict[str, Any]

log = logging.getLogger("queen_sync.builders")

_NAME_RE = re.compile(r"^[A-Za-z0-9._~-]+$")

#: The broker's queue options (camelCase wire name → kind), as ``POST /api/v1/configure`` takes them.
QUEUE_OPTIONS: Dict[str, str] = {
    "leaseTime": "seconds",
    "retryLimit": "count",
    "retryDelay": "millis",
    "deadLetterQueue": "bool",
    "dlqAfterMaxRetries": "bool",
    "priority": "int",
    "delayedProcessing": "seconds",
    "windowBuffer": "seconds",
    "maxSize": "count",
    "ttl": "seconds",
    "retentionSeconds": "seconds",
    "completedRetentionSeconds": "seconds",
    "retentionEnabled": "bool",
    "encryptionEnabled": "bool",
    "maxWaitTimeSeconds": "seconds",
}

#: What a 0.15 broker resets every omitted option to (configure is an upsert that resets).
QUEUE_OPTION_DEFAULTS: Dict[str, Any] = {
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


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


_OPTION_ALIASES: Dict[str, str] = {}
for _camel in QUEUE_OPTIONS:
    _OPTION_ALIASES[_camel] = _camel
    _OPTION_ALIASES[_snake(_camel)] = _camel
_OPTION_ALIASES["dlq_after_max_retries"] = "dlqAfterMaxRetries"
del _camel


def validate_name(kind: str, value: Any) -> str:
    """Check a queue / partition / consumer-group name; return it.

    Raises:
        InvalidInputError: not a non-empty str of ``[A-Za-z0-9._~-]``, or ``"."`` / ``".."``.
    """
    if not isinstance(value, str) or not value:
        raise InvalidInputError("%s name must be a non-empty str, got %r" % (kind, value))
    if value in (".", ".."):
        raise InvalidInputError(
            "%s name %r is not valid: '.' and '..' are not valid names, a URL path would collapse them"
            % (kind, value)
        )
    if not _NAME_RE.match(value):
        raise InvalidInputError(
            "%s name %r has characters a Queen 0.15 broker cannot route; use only A-Z a-z 0-9 . _ ~ -"
            % (kind, value)
        )
    return value


validate_path_token = validate_name


def resolve_group(message: Mapping[str, Any], explicit: Optional[str]) -> Optional[str]:
    """The consumer group to ack ``message`` for: ``explicit`` if given, else the message's own
    ``consumerGroup``; ``None`` (queue mode) for ``__QUEUE_MODE__`` or no group."""
    group = explicit if explicit is not None else message.get("consumerGroup")
    if not group or group == codec.QUEUE_MODE:
        return None
    return group


def group_from_context(context: Optional[Mapping[str, Any]], allowed_extra: Tuple[str, ...] = ()) -> Tuple[Optional[str], Dict[str, Any]]:
    """Read the consumer group from ``{"group"|"consumer_group"|"consumerGroup": g}``.

    Returns ``(group or None, the other allowed keys)``. Unknown keys raise InvalidInputError.
    """
    if context is None:
        return None, {}
    if not isinstance(context, Mapping):
        raise InvalidInputError("context must be a dict such as {'consumer_group': 'g'}, got %r" % (context,))
    keys = {"group", "consumer_group", "consumerGroup"} | set(allowed_extra)
    unknown = set(context) - keys
    if unknown:
        raise InvalidInputError(
            "unknown context key(s) %s; allowed: %s" % (sorted(map(str, unknown)), sorted(keys))
        )
    groups = {context[k] for k in ("group", "consumer_group", "consumerGroup") if context.get(k) is not None}
    if len(groups) > 1:
        raise InvalidInputError("context names two different consumer groups: %s" % sorted(map(str, groups)))
    group = groups.pop() if groups else None
    if group is not None:
        validate_name("consumer group", group)
    return group, {k: context[k] for k in allowed_extra if k in context}


def _subscription_from(value: Any) -> str:
    return timestamp_arg("subscription_from", value, allow_now=True)


def _as_items(items: Any, what: str) -> List[Mapping[str, Any]]:
    if isinstance(items, Mapping):
        return [items]
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise InvalidInputError("%s takes a dict such as {'data': ...} or a list of them, got %s" % (what, type(items).__name__))
    return list(items)


# --------------------------------------------------------------------------- pop


@dataclass(frozen=True)
class PopSpec:
    """One pop request (``GET /api/v1/pop/queue/{q}[/partition/{p}]``); see :meth:`QueueBuilder.pop`."""

    queue: str
    partition: Optional[str] = None
    group: Optional[str] = None
    batch: int = 1
    partitions: Optional[int] = None
    wait: bool = False
    timeout_millis: int = 30000
    subscription_mode: Optional[str] = None
    subscription_from: Optional[str] = None
    auto_ack: bool = False

    def path(self) -> str:
        if self.partition is None or self.partition == "Default":
            return "/api/v1/pop/queue/%s" % self.queue
        return "/api/v1/pop/queue/%s/partition/%s" % (self.queue, self.partition)

    def query(self) -> Dict[str, str]:
        q: Dict[str, str] = {"batch": str(self.batch), "wait": "true" if self.wait else "false"}
        if self.wait:
            q["timeout"] = str(self.timeout_millis)
        if self.group is not None:
            q["consumerGroup"] = self.group
        wildcard = self.partition is None or self.partition == "Default"
        if wildcard and self.partitions is not None and self.partitions > 1:
            q["partitions"] = str(self.partitions)
        if self.auto_ack:
            q["autoAck"] = "true"
        if self.subscription_mode is not None:
            q["subscriptionMode"] = self.subscription_mode
        if self.subscription_from is not None:
            q["subscriptionFrom"] = self.subscription_from
        return q


def execute_pop(client: "Queen", spec: PopSpec) -> List[Message]:
    """Send one pop and return its messages (``[]`` when there is nothing to deliver).

    The HTTP read timeout is ``spec.timeout_millis + 5000`` ms for a long poll (``wait``),
    else the client's timeout. Raises BrokerError (and transport errors) for real failures.
    """
    http_timeout = spec.timeout_millis + 5000 if spec.wait else None
    # RETRY_IF_ANSWERED: a pop whose reply was lost holds a lease; it is not resent (see transport.py)
    resp = client._request(
        "GET",
        spec.path(),
        query=spec.query(),
        idempotent=False,
        retry="answered",
        timeout_millis=http_timeout,
        affinity_key="%s/%s/%s" % (spec.queue, spec.partition or "*", spec.group or ""),
    )
    if resp.status == 204:  # pop maintenance: "paused", nothing delivered
        return []
    return codec.decode_pop(resp.data)


# --------------------------------------------------------------------------- queue builder


class QueueBuilder:
    """Builder for one queue, made by :meth:`Queen.queue`. Setters return a new builder.

    Pop/consume settings: ``partition``, ``group``, ``batch``, ``partitions``, ``wait``,
    ``timeout_millis``, ``subscription_mode``, ``subscription_from``, ``auto_ack``; consume
    only: ``each``, ``limit``, ``idle_millis``, ``concurrency``. Configure: ``namespace``,
    ``task``, ``config``.
    """

    def __init__(self, client: "Queen", name: str) -> None:
        self._client = client
        self._name = validate_name("queue", name)
        self._namespace: Optional[str] = None
        self._task: Optional[str] = None
        self._config: Dict[str, Any] = {}
        self._partition: Optional[str] = None
        self._group: Optional[str] = None
        self._batch: int = 1
        self._partitions: Optional[int] = None
        self._wait: Optional[bool] = None
        self._timeout: Optional[int] = None
        self._sub_mode: Optional[str] = None
        self._sub_from: Optional[str] = None
        self._auto_ack: Optional[bool] = None
        self._each = False
        self._limit: Optional[int] = None
        self._idle: Optional[int] = None
        self._concurrency = 1
        self._renew = False
        self._renew_interval: Optional[int] = None
        self._on_success: Optional[Callable[[Any, Any], Any]] = None
        self._on_error: Optional[Callable[[Any, BaseException], Any]] = None
        self._buffer: Any = None  # producer.BufferOptions when buffer() was called

    def __repr__(self) -> str:
        parts = ["queue=%r" % self._name]
        if self._partition is not None:
            parts.append("partition=%r" % self._partition)
        if self._group is not None:
            parts.append("group=%r" % self._group)
        return "QueueBuilder(%s)" % ", ".join(parts)

    def _with(self, **changes: Any) -> "QueueBuilder":
        new = copy.copy(self)
        for k, v in changes.items():
            setattr(new, k, v)
        return new

    @property
    def name(self) -> str:
        """The queue name."""
        return self._name

    # ---------------------------------------------------------------- configure / delete

    def namespace(self, namespace: str) -> "QueueBuilder":
        """Namespace sent with :meth:`create` (a 0.15 broker has no namespace pops)."""
        if not isinstance(namespace, str):
            raise InvalidInputError("namespace must be a str, got %r" % (namespace,))
        return self._with(_namespace=namespace)

    def task(self, task: str) -> "QueueBuilder":
        """Task sent with :meth:`create`."""
        if not isinstance(task, str):
            raise InvalidInputError("task must be a str, got %r" % (task,))
        return self._with(_task=task)

    def config(self, options: Mapping[str, Any]) -> "QueueBuilder":
        """Queue options for :meth:`create`, snake_case or camelCase keys (sent camelCase;
        broker default in brackets):

        - ``lease_time`` / ``leaseTime``: lease length in **seconds** [300].
        - ``retry_limit``: nacks that redeliver; the next nack dead-letters [3].
        - ``retry_delay``: retry delay in **milliseconds** [1000] (stored; a 0.15 broker was
          seen redelivering a nacked message at once).
        - ``dead_letter_queue``, ``dlq_after_max_retries``: flags [False]; a 0.15 broker
          stores them but dead-letters after ``retry_limit`` regardless.
        - ``priority``: queue priority, int [0].
        - ``delayed_processing``: a message becomes visible this many **seconds** after push [0].
        - ``window_buffer``: a partition is served only once its newest message is this many
          **seconds** old [0].
        - ``max_size``: max messages; not enforced by a 0.15 broker [0 = unlimited].
        - ``ttl``: message time-to-live in **seconds** [3600].
        - ``retention_seconds``, ``completed_retention_seconds``: retention of pending /
          completed messages, **seconds** [0 = keep]; ``retention_enabled`` [False].
        - ``encryption_enabled``: payload encryption at rest [False].
        - ``max_wait_time_seconds``: messages older than this many **seconds** are deleted
          (not dead-lettered) [0 = never].

        Merged with earlier ``config()`` calls. :meth:`create` resets every option not given;
        :meth:`update_config` changes only the given ones.

        Raises:
            InvalidInputError: an unknown key, or a value of the wrong type.
        """
        if not isinstance(options, Mapping):
            raise InvalidInputError("config() takes a dict of queue options, got %r" % (options,))
        merged = dict(self._config)
        for key, value in options.items():
            camel = _OPTION_ALIASES.get(key) if isinstance(key, str) else None
            if camel is None:
                raise InvalidInputError(
                    "unknown queue option %r; known: %s" % (key, ", ".join(sorted(QUEUE_OPTIONS)))
                )
            kind = QUEUE_OPTIONS[camel]
            if kind == "bool":
                _bool_arg(str(key), value)
            elif kind == "int":
                _int_arg(str(key), value, -(2**31))
            else:
                _int_arg(str(key), value, 0)
            merged[camel] = value
        return self._with(_config=merged)

    def create(self) -> Dict[str, Any]:
        """Create or reconfigure the queue (an upsert: options not given are **reset** to the
        broker defaults, which are sent explicitly).

        Returns:
            the broker dict ``{configured: True, queue, queueId, partitionId, namespace, task,
            options: {...15 camelCase options}}``.

        Raises:
            BrokerError: the broker answered with ``error`` / ``success: false``.
            ProtocolError: the reply is not a JSON object.

        Wire: ``POST /api/v1/configure`` ``{queue, namespace?, task?, options}``.
        """
        body_doc: Dict[str, Any] = {"queue": self._name}
        if self._namespace is not None:
            body_doc["namespace"] = self._namespace
        if self._task is not None:
            body_doc["task"] = self._task
        options = dict(QUEUE_OPTION_DEFAULTS)
        options.update(self._config)
        body_doc["options"] = options
        resp = self._client._request("POST", "/api/v1/configure", body=codec.encode_json(body_doc), idempotent=True)
        doc = _accepted_dict(codec.decode_json(resp.data), "configure of queue %r" % self._name, resp.status, resp.data)
        from .admin import remember_queue_options  # for update_config(): see admin.py

        remember_queue_options(self._client, doc)
        return doc

    def update_config(self, options: Mapping[str, Any]) -> Dict[str, Any]:
        """Change some queue options and keep the others (``create()`` resets every option
        not given; this does not). Keys and units as in :meth:`config`; the builder's
        ``namespace()`` / ``task()`` apply when set, else the queue's are kept.

        Reads the queue first (``GET /api/v1/status/queues/{q}``, which reports leaseTime,
        retryLimit, retryDelay, ttl, deadLetterQueue, maxSize and priority, plus namespace
        and task), merges ``options`` over them, and sends the full set with
        ``POST /api/v1/configure``. A 0.15 broker never reports the other 8 options
        (dlqAfterMaxRetries, delayedProcessing, windowBuffer, retentionSeconds,
        completedRetentionSeconds, retentionEnabled, encryptionEnabled, maxWaitTimeSeconds):
        they come from ``options``, else from this client's last configure of the queue, else
        they are reset to the broker defaults (a warning is logged). A missing queue is created.

        Race: read and write are two calls; a configure by someone else in between is
        overwritten (last writer wins). Serialise configuration changes yourself if needed.

        Returns:
            the configure reply ``{configured: True, queue, queueId, partitionId, namespace,
            task, options: {...15 options}}``.

        Raises:
            InvalidInputError: an unknown option key or a bad value (nothing sent).
            BrokerError: the broker refused the read or the configure.
        """
        from .admin import update_queue_config

        return update_queue_config(self._client, self._name, options, self._namespace, self._task)

    def dlq(self, group: Optional[str] = None) -> "DLQBuilder":
        """A builder reading this queue's dead-letter queue (rows of consumer group ``group``,
        or of every group), filtered to this builder's partition unless it is ``"Default"``:
        ``q.queue("orders").dlq("billing").limit(10).offset(0).get()`` → list of rows with
        ``errorMessage`` and ``retryCount``. See :class:`queen_sync.dlq.DLQBuilder`."""
        from .dlq import DLQBuilder

        part = None if self._partition in (None, "Default") else self._partition
        return DLQBuilder(self._client, self._name, group, part)

    def delete(self) -> Dict[str, Any]:
        """Delete the queue with all its messages (idempotent).

        Returns:
            ``{deleted: True, existed: bool, queue}``.

        Raises:
            BrokerError: the broker answered with ``error`` / ``success: false``.
            ProtocolError: the reply is not a JSON object.

        Wire: ``DELETE /api/v1/resources/queues/{queue}``.
        """
        resp = self._client._request("DELETE", "/api/v1/resources/queues/%s" % self._name, idempotent=True)
        doc = _accepted_dict(codec.decode_json(resp.data), "delete of queue %r" % self._name, resp.status, resp.data)
        from .admin import forget_queue_options  # for update_config(): see admin.py

        forget_queue_options(self._client, self._name)
        return doc

    # ---------------------------------------------------------------- push

    def partition(self, name: str) -> "QueueBuilder":
        """Partition for push / pop / consume. For pop and consume, ``"Default"`` means any
        partition (the wildcard route)."""
        return self._with(_partition=validate_name("partition", name))

    def push(self, items: Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]) -> List[Dict[str, Any]]:
        """Push one item or a list of items.

        Args:
            items: ``{"data": payload}`` (or ``{"payload": payload}``: exactly one of the
                two), optional ``transactionId`` (dedup key per partition, a non-empty str; a
                UUIDv7 is minted when absent) and ``traceId`` (a UUID string). No other key
                is accepted (a typo such as ``transactionID`` would silently lose dedup).

        Returns:
            the broker's per-item results in input order (exactly one per item), each
            ``{index, status, transaction_id, ...}`` where ``status`` is:

            - ``"queued"``: stored (with ``message_id``, ``partition_id``, ``queueName``);
            - ``"duplicate"``: that ``transactionId`` is already stored on the partition
              (``message_id`` is the stored one's);
            - ``"buffered"``: **accepted but not stored yet** — a broker in push
              maintenance mode (or failing over on a database error) wrote it to its own
              file buffer and stores it later (``{status, queue, partition,
              transactionId}``); it is not visible to pop until then, and is lost if that
              broker's disk is.

            ``push([])`` returns ``[]`` without a request. With :meth:`buffer` the results
            are this client's ``"pending"`` receipts instead (see there).

        Payloads are sent as JSON: NaN and ±Infinity (which JSON cannot represent) are sent
        as ``null``; numbers are not checked one by one.

        Raises:
            InvalidInputError: a bad item (not a dict, an unknown key, both or neither of
                ``data`` / ``payload``, a bad ``transactionId`` / ``traceId``; the message
                names the item's index) or a payload that is not JSON-serialisable; nothing
                is sent (or buffered).
            BrokerError: the broker refused the push, or an item came back ``failed``
                (``.body`` holds the results).
            ProtocolError: the reply does not hold one result per item (e.g. ``[]``): the
                outcome is unknown; pushing the same items again (same ``transactionId`` s)
                is safe.

        Wire: ``POST /api/v1/push`` ``{"items": [...]}`` (retried safely: ids are client-minted).
        """
        lst = _as_items(items, "push()")
        if not lst:
            return []
        if self._buffer is not None:  # buffered: see buffer() and queen_sync/producer.py
            self._client._check_open()
            return self._client._producer.push(self._name, self._partition, lst, self._buffer)
        body, _wire = codec.encode_push(self._name, self._partition, lst)
        resp = self._client._request(
            "POST", "/api/v1/push", body=body, idempotent=True,
            affinity_key="%s/%s" % (self._name, self._partition or "Default"),
        )
        results = codec.decode_push_result(resp.data)
        if len(results) != len(lst):
            raise ProtocolError(
                "push reply has %d results for %d items; the outcome is unknown" % (len(results), len(lst)),
                resp.data,
            )
        failed = [r for r in results if r.get("status") == "failed"]
        if failed:
            raise BrokerError(
                "%d of %d pushed items failed: %s"
                % (len(failed), len(results), ", ".join(sorted({str(r.get("error")) for r in failed}))),
                status=resp.status,
                error=failed[0].get("error"),
                body=results,
            )
        return results

    def buffer(
        self,
        message_count: Any = 100,
        time_millis: int = 1000,
        *,
        max_bytes: int = 1 << 20,
        max_messages: Optional[int] = None,
        block_timeout_millis: int = 10000,
    ) -> "QueueBuilder":
        """Buffer this builder's pushes and send them in batches from a background thread
        (one buffer per queue/partition; see :mod:`queen_sync.producer`).

        Args:
            message_count: send a batch at this many buffered messages; also the largest
                batch (default 100). A dict ``{"message_count": .., "time_millis": ..}``
                (official-client style) is accepted too.
            time_millis: send a batch this many **milliseconds** after the oldest buffered
                message arrived (default 1000).
            max_bytes: send a batch at this many bytes of encoded items (default 1 MiB).
            max_messages: bound of unsent messages (default ``max(10000, 10 * message_count)``).
            block_timeout_millis: when the buffer is full, ``push`` waits this many
                **milliseconds** for room, then raises :class:`BufferFullError` (default 10000).

        ``push()`` then validates and encodes the items at once (bad input raises
        :class:`InvalidInputError`, nothing buffered) and returns one ``{index, status:
        "pending", transaction_id, queueName}`` per item: ``"pending"`` means held in this
        client's buffer, not sent yet (unlike a broker's ``"buffered"``, see :meth:`push`).
        Delivery: :meth:`flush`, ``Queen.flush_all_buffers()``, ``Queen.close()``; counters:
        ``Queen.get_buffer_stats()``. Failed sends (connection errors, 5xx, 408, 429) are
        resent until delivered or closed; a batch the broker **permanently refuses** (any
        other 4xx, e.g. 413 body too large, 400, 401/403) is not retried: its messages are
        counted in the stats' ``failed``, logged at ERROR (queue, partition, count, status,
        error text) and dropped, and the rest of the buffer goes on.

        Raises:
            InvalidInputError: a bad option value.
        """
        from .producer import BufferOptions

        if isinstance(message_count, Mapping):
            opts = dict(message_count)
            unknown = set(opts) - {"message_count", "time_millis", "max_bytes", "max_messages", "block_timeout_millis"}
            if unknown:
                raise InvalidInputError("unknown buffer option(s) %s" % sorted(map(str, unknown)))
            return self._with(_buffer=BufferOptions(**opts))
        return self._with(
            _buffer=BufferOptions(
                message_count=message_count,
                time_millis=time_millis,
                max_bytes=max_bytes,
                max_messages=max_messages,
                block_timeout_millis=block_timeout_millis,
            )
        )

    def flush(self, timeout_millis: Optional[int] = None) -> int:
        """Send this queue/partition's buffered pushes now and wait until the broker confirmed
        them (at most ``timeout_millis`` **milliseconds**; None = until delivered).

        Returns:
            the number of messages still unconfirmed (0 = all delivered, or nothing buffered).
        """
        self._client._check_open()
        return self._client._producer.flush(self._name, self._partition, timeout_millis)

    flush_buffer = flush

    # ---------------------------------------------------------------- pop settings

    def group(self, name: str) -> "QueueBuilder":
        """Consumer group (each group has its own cursor); without one, queue mode."""
        return self._with(_group=validate_name("consumer group", name))

    def batch(self, n: int) -> "QueueBuilder":
        """Messages per pop (>= 1; default 1)."""
        return self._with(_batch=_int_arg("batch", n, 1))

    def partitions(self, n: int) -> "QueueBuilder":
        """How many partitions one wildcard pop may claim (>= 1; broker default 1)."""
        return self._with(_partitions=_int_arg("partitions", n, 1))

    def wait(self, enabled: bool = True) -> "QueueBuilder":
        """Long poll: the broker holds the pop until a message arrives or the timeout passes.
        Default: **False for pop()**, True for consume()."""
        return self._with(_wait=_bool_arg("wait", enabled))

    def timeout_millis(self, ms: int) -> "QueueBuilder":
        """Long-poll timeout in **milliseconds** (>= 0; default: the client's timeout_millis)."""
        return self._with(_timeout=_int_arg("timeout_millis", ms, 0))

    def subscription_mode(self, mode: str) -> "QueueBuilder":
        """Where a **new** consumer group starts: ``"all"`` (whole history, the broker
        default) or ``"new"`` (only messages after its first pop)."""
        if mode not in ("all", "new"):
            raise InvalidInputError("subscription_mode must be 'all' or 'new', got %r" % (mode,))
        return self._with(_sub_mode=mode)

    def subscription_from(self, start: Union[str, _dt.datetime]) -> "QueueBuilder":
        """Where a new consumer group starts: ``"now"``, an ISO-8601 timestamp such as
        ``2026-11-30T06:21:21.749Z`` / ``2026-11-30T07:21:21+01:00`` / ``2026-11-30`` (no
        offset means UTC), or a datetime (naive means UTC). Timestamps are sent as
        ``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC; forms a broker cannot read (week dates
        ``2026-W01-1``, basic ``20260101T000000Z``) raise :class:`InvalidInputError`
        (a 0.15 broker would silently read them as "all history")."""
        return self._with(_sub_from=_subscription_from(start))

    def auto_ack(self, enabled: bool = True) -> "QueueBuilder":
        """pop(): True sends ``autoAck=true``: the broker commits the messages **at delivery**
        (at-most-once: no lease, ``leaseId`` is ``""``, nothing to ack or renew; a message is
        lost if the caller dies before processing it). Default False (at-least-once: ack
        each message). consume(): True (default) acks ``completed`` after the handler returns
        and nacks ``failed`` when it raises; False leaves acking to the handler (consume never
        sends ``autoAck=true``)."""
        return self._with(_auto_ack=_bool_arg("auto_ack", enabled))

    def each(self) -> "QueueBuilder":
        """consume(): call the handler with one message at a time, even when ``batch > 1``."""
        return self._with(_each=True)

    def limit(self, n: int) -> "QueueBuilder":
        """consume(): stop after ``n`` messages in total across all workers (never overshoots)."""
        return self._with(_limit=_int_arg("limit", n, 1))

    def idle_millis(self, ms: int) -> "QueueBuilder":
        """consume(): stop after ``ms`` **milliseconds** without a message."""
        return self._with(_idle=_int_arg("idle_millis", ms, 1))

    def concurrency(self, n: int) -> "QueueBuilder":
        """consume(): number of worker threads (>= 1; default 1)."""
        return self._with(_concurrency=_int_arg("concurrency", n, 1))

    def renew_lease(self, enabled: bool = True, interval_millis: Optional[int] = None) -> "QueueBuilder":
        """consume(): keep the leases of unfinished messages alive while they wait or are
        handled, renewing at least every ``interval_millis`` **milliseconds** (default
        10000). Each renewal asks for max(5, 3 × interval) seconds. The first renewal of a
        pop's lease is sent min(interval, 500 ms) after the pop (the queue's ``leaseTime``
        may be shorter than the interval), the next ones at half the time the broker's
        ``expiresAt`` leaves, at most ``interval_millis`` apart. A lease already expired at its
        first renewal is logged (WARNING, once per consumer): then shorten the interval or
        lengthen the queue's ``leaseTime``.
        Wire: ``POST /api/v1/lease/{leaseId}/extend`` ``{"seconds": N}``."""
        _bool_arg("renew_lease enabled", enabled)
        if interval_millis is not None:
            _int_arg("interval_millis", interval_millis, 1)
        from .consumer import DEFAULT_RENEW_INTERVAL_MILLIS

        interval = (DEFAULT_RENEW_INTERVAL_MILLIS if interval_millis is None else interval_millis) if enabled else None
        return self._with(_renew=enabled, _renew_interval=interval)

    def on_success(self, callback: Callable[[Any, Any], Any]) -> "QueueBuilder":
        """consume(): call ``callback(message_or_list, handler_result)`` after the handler
        returns. Setting on_success or on_error turns auto-ack off: the callbacks ack."""
        if not callable(callback):
            raise InvalidInputError("on_success() needs a callable, got %r" % (callback,))
        return self._with(_on_success=callback)

    def on_error(self, callback: Callable[[Any, BaseException], Any]) -> "QueueBuilder":
        """consume(): call ``callback(message_or_list, exception)`` when the handler (or
        on_success) raises; the exception is then swallowed. Turns auto-ack off."""
        if not callable(callback):
            raise InvalidInputError("on_error() needs a callable, got %r" % (callback,))
        return self._with(_on_error=callback)

    def pop_spec(self, *, for_consume: bool = False) -> PopSpec:
        """The :class:`PopSpec` this builder describes (pop defaults, or consume defaults)."""
        wait = self._wait if self._wait is not None else for_consume
        return PopSpec(
            queue=self._name,
            partition=self._partition,
            group=self._group,
            batch=self._batch,
            partitions=self._partitions,
            wait=wait,
            timeout_millis=self._timeout if self._timeout is not None else self._client.timeout_millis,
            subscription_mode=self._sub_mode,
            subscription_from=self._sub_from,
            auto_ack=bool(self._auto_ack) if not for_consume else False,
        )

    # ---------------------------------------------------------------- pop / consume

    def pop(self) -> List[Message]:
        """Pop up to ``batch`` messages once.

        Returns:
            the message dicts (``id, transactionId, partitionId, partition, data, createdAt,
            leaseId, consumerGroup, traceId, producerSub``); ``[]`` when there is nothing to
            deliver (empty queue, all partitions leased, long poll expired). ``wait`` defaults
            to **False** here.

        Raises:
            BrokerError / QueenHTTPError / QueenConnectionError: real failures (never ``[]``).

        Wire: ``GET /api/v1/pop/queue/{q}[/partition/{p}]?batch=&wait=&timeout=&consumerGroup=
        &partitions=&autoAck=&subscriptionMode=&subscriptionFrom=``.
        """
        return execute_pop(self._client, self.pop_spec())

    @overload
    def consume(
        self,
        handler: Callable[[Any], Any],
        *,
        stop_event: Optional[Any] = ...,
        background: Literal[False] = ...,
        handle_signals: bool = ...,
        drain_timeout: float = ...,
    ) -> "ConsumeResult": ...

    @overload
    def consume(
        self,
        handler: Callable[[Any], Any],
        *,
        stop_event: Optional[Any] = ...,
        background: Literal[True],
        handle_signals: bool = ...,
        drain_timeout: float = ...,
    ) -> "Consumer": ...

    @overload
    def consume(
        self,
        handler: Callable[[Any], Any],
        *,
        stop_event: Optional[Any] = ...,
        background: bool,
        handle_signals: bool = ...,
        drain_timeout: float = ...,
    ) -> Union["ConsumeResult", "Consumer"]: ...

    def consume(
        self,
        handler: Callable[[Any], Any],
        *,
        stop_event: Optional[Any] = None,
        background: bool = False,
        handle_signals: bool = False,
        drain_timeout: float = 30.0,
    ) -> Union["ConsumeResult", "Consumer"]:
        """Consume with ``concurrency`` handler threads until ``limit`` messages, ``idle_millis``
        without a message, ``stop_event`` (a ``threading.Event``) is set, the client is
        closed, or a stop (:meth:`Consumer.stop`, KeyboardInterrupt, or a signal with
        ``handle_signals``). See :mod:`queen_sync.consumer` for the details.

        .. warning::
            **What the handler receives depends on** ``batch`` **and** ``each()``:

            * ``each()`` or ``batch(1)`` (the default): **one message dict** per call.
            * ``batch(n)`` with ``n > 1`` and **no** ``.each()``: a **list** of message dicts
              (the messages of one partition from one pop) per call — even when the list
              holds a single message. Write ``for m in msgs:`` in such a handler, or add
              ``.each()`` to get one dict at a time.

        Within one partition messages are handled one at a time in push order; different
        partitions run in parallel; at most ``concurrency × batch`` messages are held. With
        auto-ack (default) a return acks ``completed`` and an exception nacks ``failed`` with
        the exception text (the consumer goes on; each failure is logged at WARNING with its
        traceback); refused acks are logged and counted. With ``auto_ack(False)`` the handler acks itself,
        and an exception stops the consumer and is re-raised. ``on_success`` / ``on_error``
        callbacks turn auto-ack off. ``renew_lease(True)`` keeps leases alive. Connection
        errors are retried forever with backoff; authentication errors stop the consumer.
        If ``idle_millis`` passes while the broker is unreachable (an outage is in progress
        and no call got an answer since it began), the consumer stops with reason
        ``"unreachable"`` and the last connection error is raised (blocking) or kept in
        ``Consumer.error`` and re-raised by ``join()`` (background): a cron job can tell
        "no work" (reason ``"idle"``) from "broker down". ``Queen.close()`` stops the
        client's consumers gracefully (in-flight handlers finish and are acked) first, within
        its one close deadline (a handler still running then is abandoned; the broker
        redelivers its message after the lease expires).

        Args:
            handler: callable taking a message dict (``each()`` / ``batch(1)``) or a **list**
                of them (``batch(n > 1)`` without ``each()``), see the warning above.
            stop_event: optional ``threading.Event`` that stops the consumer when set.
            background: False (default) blocks and returns a ConsumeResult; True starts the
                consumer in background threads and returns the
                :class:`~queen_sync.consumer.Consumer` (``stop(drain_timeout)``,
                ``join(timeout)``, ``is_running``, live counters).
            handle_signals: turn SIGTERM / SIGINT into a graceful stop and restore the
                previous handlers afterwards (main thread only, else InvalidInputError).
                Default False: no signal handler is installed.
            drain_timeout: **seconds** a stop waits for popped messages to be handled and
                acked (default 30.0). Then the messages no handler got are released, except
                those queued behind a still-running handler of the same partition: they are
                released once it returns. The blocking form returns at the end of the drain;
                handlers still running then finish in the background (their acks and those
                releases are not in the returned counts: use ``background=True`` and
                ``join()`` for the final ones).

        Returns:
            a :class:`~queen_sync.consumer.ConsumeResult` (counts and stop reason), or the
            running :class:`~queen_sync.consumer.Consumer` with ``background=True``.

        Raises:
            InvalidInputError: bad arguments. In blocking mode: the handler's exception
            (``auto_ack(False)``), an AuthenticationError or other non-transient pop error;
            QueenConnectionError (or the QueenHTTPError of a 5xx / 429 reply) when
            ``idle_millis`` passed with the broker unreachable (reason ``"unreachable"``);
            KeyboardInterrupt is re-raised after a graceful stop.
        """
        from .consumer import Consumer

        consumer = Consumer(
            self._client,
            self,
            handler,
            stop_event=stop_event,
            handle_signals=handle_signals,
            drain_timeout=drain_timeout,
        )
        if _bool_arg("background", background):
            return consumer.start()
        return consumer.run()


def _accepted_dict(doc: Any, what: str, status: int, raw: bytes) -> Dict[str, Any]:
    """Return the decoded reply ``doc`` of a configure / delete call when it is a JSON object
    the broker did not refuse. Raises BrokerError (``{"error": ...}`` or ``success: false``)
    or ProtocolError (not a JSON object: a Queen broker always answers one)."""
    if isinstance(doc, dict) and (doc.get("error") is not None or doc.get("success") is False):
        err = doc.get("error")
        raise BrokerError("%s refused by the broker: %s" % (what, err), status=status, error=err, body=doc)
    if not isinstance(doc, dict):
        raise ProtocolError("%s: the reply is not a JSON object" % what, raw)
    return doc


# --------------------------------------------------------------------------- transactions


class TransactionQueueBuilder:
    """The ``transaction().queue(q)[.partition(p)]`` step; :meth:`push` returns the transaction."""

    def __init__(self, tx: "TransactionBuilder", queue: str, partition: Optional[str] = None) -> None:
        self._tx = tx
        self._queue = validate_name("queue", queue)
        self._partition = partition

    def partition(self, name: str) -> "TransactionQueueBuilder":
        """Partition of the pushed items (default: the broker's ``Default``)."""
        return TransactionQueueBuilder(self._tx, self._queue, validate_name("partition", name))

    def push(self, items: Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]) -> "TransactionBuilder":
        """Add a push of one item or a list (same item rules as :meth:`QueueBuilder.push`;
        each item gets a client-minted ``transactionId``). Returns the transaction builder."""
        lst = _as_items(items, "transaction push()")
        self._tx._add(codec.build_tx_push_op(self._queue, self._partition, lst))
        return self._tx


class TransactionBuilder:
    """An atomic bundle of pushes and acks, made by :meth:`Queen.transaction`::

        q.transaction().queue("invoices").partition("acme").push([{"data": inv}]) \\
            .ack(order, "completed", {"consumer_group": "billing"}).commit()

    The commit body is built once, at the first :meth:`commit`; after that no operation can
    be added, and a commit whose outcome is unknown (lost reply) may be retried on the same
    builder, which resends the same body (see :meth:`commit`).

    Not thread-safe; build and commit it in one thread.
    """

    def __init__(self, client: "Queen") -> None:
        self._client = client
        self._ops: List[Dict[str, Any]] = []
        self._body: Optional[bytes] = None  # built once, at the first commit
        self._outcome: Optional[str] = None  # None (not sent / unknown), "committed", "rejected"
        self._uncertain = False  # an earlier attempt may have reached the broker

    def __repr__(self) -> str:
        state = ""
        if self._outcome is not None:
            state = ", " + self._outcome
        elif self._uncertain:
            state = ", outcome unknown"
        return "TransactionBuilder(operations=%d%s)" % (len(self._ops), state)

    def _add(self, op: Dict[str, Any]) -> None:
        if self._outcome == "committed":
            raise InvalidInputError("this transaction was already committed")
        if self._body is not None:
            raise InvalidInputError(
                "this transaction was already sent: no operation can be added (retry commit() "
                "or build a new transaction)"
            )
        self._ops.append(op)

    @property
    def operations(self) -> List[Dict[str, Any]]:
        """A copy of the operations added so far (wire dicts)."""
        return [dict(op) for op in self._ops]

    def queue(self, name: str) -> TransactionQueueBuilder:
        """Start a push to queue ``name``."""
        return TransactionQueueBuilder(self, name)

    def ack(
        self,
        messages: Union[Message, Sequence[Message]],
        status: Union[bool, str] = "completed",
        context: Optional[Mapping[str, Any]] = None,
    ) -> "TransactionBuilder":
        """Add an ack of one message or a list.

        Args:
            messages: popped message dicts; each op carries the message's ``leaseId``, so
                the whole commit is rejected if the lease has expired.
            status: ``"completed"`` (or True / ``"success"``), ``"failed"`` / False or
                ``"dlq"`` (both go straight to the dead-letter queue inside a transaction).
                ``"retry"`` is refused (a 0.15 broker rejects it in transactions).
            context: ``{"consumer_group": g}`` or ``{"group": g}``; default: the message's
                own ``consumerGroup`` (queue mode for ``__QUEUE_MODE__``). ``{"error": text}``
                is the reason a ``failed`` / ``dlq`` ack records as the dead-letter row's
                ``errorMessage`` (without it the broker writes ``"Unknown error"``).

        Raises:
            InvalidInputError: a bad message, status or context, or the transaction was
                already sent (nothing added).

        Wire: each message becomes ``{"type": "ack", transactionId, partitionId, status,
        consumerGroup?, leaseId?, error?}`` in the commit body.
        """
        st = codec.normalize_status(status)
        if st == "retry":
            raise InvalidInputError("status 'retry' is not accepted inside a transaction by a Queen 0.15 broker")
        group, extra = group_from_context(context, ("error",))
        error = extra.get("error")
        lst = _as_items(messages, "transaction ack()")
        if not lst:
            raise InvalidInputError("transaction ack() needs at least one message")
        ops = [codec.build_tx_ack_op(m, st, resolve_group(m, group), error) for m in lst]
        for op in ops:
            self._add(op)
        return self

    def commit(self, retries: int = 0) -> Dict[str, Any]:
        """Send the transaction; the broker applies all operations or none.

        The body (with the client-minted ``transactionId`` of every pushed item) is built
        once, at the first call. The transport **never resends a transaction by itself**
        once it may have reached the broker: a lost reply (connection broken after sending,
        read timeout, a 500 / 502 / 504) raises, and the transaction may or may not have
        been applied. Then call ``commit()`` again **on the same builder** (never build a
        new transaction: its new push ids would duplicate the pushes if the first attempt
        had landed). The retry resends the same body; if the earlier attempt was applied,
        the broker refuses the retry (its push ids already exist) and rolls it back, so
        nothing is pushed or acked twice, and :class:`TransactionError` is raised with
        ``maybe_committed = True``: treat that as success. Recommended pattern::

            tx = q.transaction().queue("out").push([{"data": d}]).ack(msg, "completed")
            try:
                tx.commit(retries=5)           # or: catch QueenConnectionError, commit() again
            except TransactionError as exc:
                if not exc.maybe_committed:
                    raise                     # really rejected: nothing was applied
                # the lost earlier attempt was (most likely) committed: done

        ``maybe_committed`` is also set when, after a lost reply, the retry is refused
        because an ack's lease is gone ("Invalid or expired lease" / "Message not found")
        before any push could show the earlier attempt failed: either that attempt released
        the lease (committed), or it did not commit and the message is redelivered once its
        lease expires, so treating it as done loses nothing (at-least-once). Put the pushes
        before the acks (as in the example) to get the exact answer.

        Args:
            retries: how many more times to send the same body after a failure whose
                outcome is unknown or that the broker did not process (:class:`QueenConnectionError`
                / :class:`QueenTimeoutError`, a 5xx or 429 reply), waiting the client's backoff
                between attempts (the client's ``retry_delay_millis`` / ``backoff``). Default 0:
                the error is raised at once and ``commit()`` may be called again. Each
                attempt also gets the transport's own retries of requests never sent.

        Returns:
            the broker dict ``{success: True, transactionId, results: [...]}``.

        Raises:
            InvalidInputError: no operations ("Transaction has no operations to commit"),
                a bad ``retries``, or the transaction was already committed or rejected.
            TransactionError: the broker rejected it (``.result`` is its reply). Nothing of
                this attempt was applied; ``.maybe_committed`` says an earlier attempt whose
                reply was lost most likely was (see above).
            QueenConnectionError / QueenTimeoutError: no reply (``.sent`` False: certainly
                not applied); the outcome is unknown: call ``commit()`` again.
            QueenHTTPError: a non-2xx reply; after a 5xx or 429 ``commit()`` may be called
                again, after another 4xx the transaction counts as rejected.
            ProtocolError: an unreadable 2xx reply (outcome unknown; ``commit()`` may be
                called again). ClientClosedError: the client is closed.

        Wire: ``POST /api/v1/transaction`` ``{"operations": [...]}``, the same bytes on
        every attempt.
        """
        retries = _int_arg("retries", retries, 0)
        if self._outcome == "committed":
            raise InvalidInputError("this transaction was already committed")
        if self._outcome == "rejected":
            raise InvalidInputError("this transaction was rejected by the broker; build a new one")
        if self._body is None:
            self._body = codec.encode_transaction(self._ops)
        failures = 0
        while True:
            try:
                return self._send()
            except (QueenConnectionError, QueenHTTPError) as exc:
                if failures >= retries or not _tx_retryable(exc):
                    raise
                transport = self._client._transport
                delay = transport.backoff.compute(failures)
                failures += 1
                log.warning(
                    "transaction commit failed (%s); resending the same transaction (retry %d of %d) in %.0f ms",
                    exc,
                    failures,
                    retries,
                    delay * 1000.0,
                )
                if transport._pause(delay):
                    raise ClientClosedError("the Queen client was closed while retrying a transaction commit") from exc

    def _send(self) -> Dict[str, Any]:
        """One commit attempt with the built body; updates the builder's outcome."""
        assert self._body is not None
        had_uncertain = self._uncertain
        try:
            resp = self._client._request("POST", "/api/v1/transaction", body=self._body, idempotent=False)
            doc = codec.decode_transaction_result(resp.data)
        except (QueenConnectionError, QueenHTTPError) as exc:
            if _tx_retryable(exc):
                if _tx_maybe_applied(exc):
                    self._uncertain = True
            else:
                self._outcome = "rejected"
            raise
        except ProtocolError:
            self._uncertain = True  # a 2xx reply we cannot read: it may have been applied
            raise
        if doc.get("success") is True:
            self._outcome = "committed"
            return doc
        err = doc.get("error")
        verdict = _tx_retry_verdict(err, doc, self._ops) if had_uncertain else None
        if verdict is not None:
            self._outcome = "committed"
            log.info("transaction retry refused by the broker (%s): %s", err, verdict)
            raise TransactionError(
                "transaction retry refused by the broker: %s; %s" % (err, verdict),
                result=doc,
                maybe_committed=True,
                status=resp.status,
                error=err,
                body=doc,
            )
        self._outcome = "rejected"
        raise TransactionError(
            "transaction rejected by the broker (rolled back): %s" % (err,),
            result=doc,
            status=resp.status,
            error=err,
            body=doc,
        )


def _tx_retryable(exc: Exception) -> bool:
    """A failed commit attempt after which the same body may be sent again."""
    if isinstance(exc, QueenConnectionError):
        return True
    if isinstance(exc, QueenHTTPError):
        return exc.status is not None and (exc.status >= 500 or exc.status == 429)
    return False


def _tx_maybe_applied(exc: Exception) -> bool:
    """Whether a failed attempt may have been applied by the broker."""
    if isinstance(exc, QueenConnectionError):
        return exc.sent is not False
    if isinstance(exc, QueenHTTPError):
        return exc.status not in (429, 503)  # 429 / 503: refused, nothing processed
    return True


#: A 0.15 broker refuses a push whose transactionId exists with PostgreSQL's
#: 'duplicate key value violates unique constraint "messages_partition_transaction_unique"'.
_DUP_KEY = "duplicate key"
_LEASE_GONE = ("ACK operation failed: Invalid or expired lease", "ACK operation failed: Message not found")


def _tx_retry_verdict(err: Any, doc: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """Why a rejected retry means an earlier attempt was (probably) committed, or None."""
    if not isinstance(err, str):
        return None
    has_push = any(op.get("type") == "push" for op in ops)
    if has_push and _DUP_KEY in err and "transaction" in err:
        return (
            "its push transactionIds already exist, so the earlier attempt whose reply was lost was "
            "most likely committed (this retry was rolled back; nothing was applied twice)"
        )
    if err.startswith(_LEASE_GONE):
        results = doc.get("results")
        pushed = isinstance(results, list) and any(
            isinstance(r, dict) and r.get("type") == "push" and r.get("success") is True for r in results
        )
        if not pushed:  # a push accepted before the failing ack proves the earlier attempt did not land
            return (
                "the ack's lease is gone, so the earlier attempt whose reply was lost may have been "
                "committed (if it was not, the message is redelivered when its lease expires)"
            )
    return None
