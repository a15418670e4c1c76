"""The fluent, blocking queue builder: :class:`QueueBuilder` (create / delete / push / pop /
consume / dead-letter reads of one queue).

Every setter returns a **new** builder (the original is unchanged), so a builder can be
kept and reused, even from several threads::

    orders = q.queue("orders")
    orders.partition("acme").push({"data": {"id": 1}})      # orders itself has no partition
    msgs = orders.group("billing").batch(10).wait(True).pop()

Names of queues, partitions and consumer groups must be non-empty strings of URL-safe
characters ``[A-Za-z0-9._~-]`` (not ``"."`` nor ``".."``): a 0.15 broker does not URL-decode
paths. Bad input raises :class:`InvalidInputError` before anything is sent.

The builder works through the client's :class:`~queen_sync._session.Session`: its wire
requester (routes in :mod:`queen_sync.wire`), its buffer manager (:mod:`queen_sync.producer`)
and its consumer registry (``consume()``).
"""

from __future__ import annotations

import copy
import datetime as _dt
from typing import Any, Callable, Dict, List, Literal, Mapping, Optional, Sequence, Union, cast, overload

from ._callables import check_arity
from ._session import Session
from ._validate import (
    bool_arg,
    int_arg,
    items_arg,
    millis_or_deprecated_seconds,
    timeout_arg,
    timestamp_arg,
    validate_label,
    validate_name,
)
from .consumer import MAX_CONCURRENCY, BuilderSettings, ConsumeResult, Consumer, renew_interval
from .dlq import DLQBuilder
from .errors import InvalidInputError
from .message import bind_messages
from .options import QUEUE_OPTION_DEFAULTS, check_options, update_queue_config
from .producer import BufferOptions
from .pushing import push_now
from .wire import messages as wire_messages
from .wire.messages import PopSpec
from .wire import resources as wire_resources

__all__ = ["QueueBuilder"]

Message = Dict[str, Any]


def _subscription_from(value: Any) -> str:
    return timestamp_arg("subscription_from", value, allow_now=True)


class QueueBuilder:
    """Builder for one queue, made by :meth:`queen_sync.Queen.queue` (the client; acks of
    popped messages: :meth:`queen_sync.Queen.ack`). Setters return a new builder.

    Pop/consume settings: ``partition``, ``group``, ``batch``, ``partitions``, ``wait``,
    ``timeout_millis``, ``subscription_mode``, ``subscription_from``, ``auto_ack``; consume
    only: ``each``, ``limit``, ``idle_millis``, ``concurrency``, ``renew_lease``,
    ``on_success``, ``on_error``. Configure: ``namespace``, ``task``, ``config``.
    Actions: :meth:`create`, :meth:`update_config`, :meth:`delete`, :meth:`push`,
    :meth:`buffer` (then ``push`` / :meth:`flush`), :meth:`pop`, :meth:`consume` (a
    :class:`~queen_sync.ConsumeResult`, or a :class:`~queen_sync.Consumer` with
    ``background=True``), :meth:`dlq`. Atomic pushes with acks: :meth:`queen_sync.Queen.transaction`.
    """

    def __init__(self, session: Session, name: str) -> None:
        self._session = session
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
        """``QueueBuilder(queue='q'[, partition='p'][, group='g'][, buffer(message_count=..,
        time_millis=.., max_bytes=.., max_messages=.., block_timeout_millis=..)])``: the
        buffer settings once :meth:`buffer` was called (a builder holds no secret)."""
        parts = ["queue=%r" % self._name]
        if self._partition is not None:
            parts.append("partition=%r" % self._partition)
        if self._group is not None:
            parts.append("group=%r" % self._group)
        if self._buffer is not None:
            b = self._buffer
            parts.append("buffer(message_count=%d, time_millis=%d, max_bytes=%d, max_messages=%d, block_timeout_millis=%d)"
                         % (b.message_count, b.time_millis, b.max_bytes, b.max_messages, b.block_timeout_millis))
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
        """Namespace sent with :meth:`create` / :meth:`update_config` (a 0.15 broker has no
        namespace pops): a non-empty str of at most 255 characters (the broker's column;
        any characters, it is sent in the JSON body). Without it :meth:`create` resets the
        queue's namespace to ``""``; :meth:`update_config` keeps it.

        Raises:
            InvalidInputError: not a str, empty, or longer than 255 characters.
        """
        return self._with(_namespace=validate_label("namespace", namespace))

    def task(self, task: str) -> "QueueBuilder":
        """Task sent with :meth:`create` / :meth:`update_config`; the same rules as
        :meth:`namespace` (without it :meth:`create` resets the task to ``""``).

        Raises:
            InvalidInputError: not a str, empty, or longer than 255 characters.
        """
        return self._with(_task=validate_label("task", task))

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

        Merged with earlier ``config()`` calls. :meth:`create` resets every option not given
        (and the namespace / task, to ``""``, when not set on the builder);
        :meth:`update_config` changes only the given ones.

        Raises:
            InvalidInputError: an unknown key, or a value of the wrong type.
        """
        merged = dict(self._config)
        merged.update(check_options(options))
        return self._with(_config=merged)

    def create(self) -> Dict[str, Any]:
        """Create or reconfigure the queue (an upsert: options not given are **reset** to the
        broker defaults, which are sent explicitly). The namespace and task are reset too:
        without :meth:`namespace` / :meth:`task` on this builder the key is not sent and the
        broker sets it to ``""`` (also for a queue a push auto-created, whose namespace was
        its name); keep them with ``namespace(...)`` / ``task(...)`` here, or use
        :meth:`update_config`.

        Returns:
            the broker dict ``{configured: True, queue, queueId, partitionId, namespace, task,
            options: {...15 camelCase options}}``.

        Raises:
            BrokerError: the broker answered with ``error`` / ``success: false``.
            ProtocolError: the reply is not a JSON object.

        Wire: ``POST /api/v1/configure`` ``{queue, namespace?, task?, options}`` (``namespace``
        / ``task`` only when set on the builder).
        """
        options = dict(QUEUE_OPTION_DEFAULTS)
        options.update(self._config)
        doc = wire_resources.configure(
            self._session, self._name, options, namespace=self._namespace, task=self._task
        )
        self._session.options.remember(doc)  # for update_config(): see queen_sync.options
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
        they are reset to the broker defaults (a warning is logged). A missing queue is
        refused (the read says ``Queue not found``; nothing is configured, no queue made):
        create it with ``config(...).create()``.

        Race: read and write are two calls; a configure by someone else in between is
        overwritten (last writer wins). Serialise configuration changes yourself if needed.

        Returns:
            the configure reply ``{configured: True, queue, queueId, partitionId, namespace,
            task, options: {...15 options}}``.

        Raises:
            InvalidInputError: an unknown option key or a bad value (nothing sent).
            BrokerError: the queue does not exist (``.error`` ``"Queue not found"``; only the
                read was sent), or the broker refused the read or the configure.
        """
        return update_queue_config(
            self._session, self._session.options, self._name, options, self._namespace, self._task
        )

    def dlq(self, group: Optional[str] = None) -> "DLQBuilder":
        """A builder reading this queue's dead-letter queue:
        ``q.queue("orders").dlq("billing").limit(10).offset(0).get()`` → list of rows with
        ``errorMessage`` and ``retryCount``. See :class:`queen_sync.dlq.DLQBuilder`.

        Args:
            group: only the rows of this consumer group (``"__QUEUE_MODE__"``: queue mode);
                default: this builder's :meth:`group`, else every group. Sent to the broker,
                which filters by it.

        The builder's :meth:`partition` (``"Default"`` included: here it names that
        partition, it is no wildcard as for pop) keeps only that partition's rows; the
        broker's route cannot filter by partition, so the client does, over the full list
        it reads (exact).

        Raises:
            InvalidInputError: ``group`` is not a valid name, or differs from the builder's
                :meth:`group` (nothing sent).
        """
        if group is not None:
            group = validate_name("consumer group", group)
        if group is not None and self._group is not None and group != self._group:
            raise InvalidInputError(
                "dlq(%r) on a builder of consumer group %r: name one group (dlq() reads the builder's)"
                % (group, self._group)
            )
        return DLQBuilder(self._session, self._name, group if group is not None else self._group, self._partition)

    def delete(self) -> Dict[str, Any]:
        """Delete the queue with all its messages (idempotent).

        Returns:
            ``{deleted: True, existed: bool, queue}``.

        Raises:
            BrokerError: the broker answered with ``error`` / ``success: false``.
            ProtocolError: the reply is not a JSON object.

        Wire: ``DELETE /api/v1/resources/queues/{queue}``.
        """
        doc = wire_resources.delete_queue(self._session, self._name)
        self._session.options.forget(self._name)  # for update_config(): see queen_sync.options
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

        Payloads are sent as JSON: NaN and ±Infinity (which JSON cannot represent) raise
        InvalidInputError naming where they sit, unless the client was made with
        ``Queen(nan_as_null=True)``, which sends them as ``null``.

        Raises:
            InvalidInputError: a bad item (not a dict, an unknown key, both or neither of
                ``data`` / ``payload``, a bad ``transactionId`` / ``traceId``; the message
                names the item's index) or a payload that is not JSON-serialisable; nothing
                is sent (or buffered). With :meth:`buffer`, also when this queue/partition's
                buffer is open with other settings (see there).
            BrokerError: the broker refused the push, or an item came back ``failed``
                (``.body`` holds the results).
            QueenConnectionError / QueenTimeoutError: the broker stayed unreachable, or its
                replies were lost (an empty 200 body counts as lost), for the whole push
                retry budget (``push_retry_timeout_millis``): the outcome is unknown.
            ProtocolError: the replies never held one result per item within the budget.

            Every error raised after the items were built carries them as ``err.items``
            (with the ``transactionId`` s of this call): ``push(err.items)`` is the safe
            re-push (what was stored is answered ``duplicate``); pushing the original
            items again is a **new** send (ids minted afresh for items that had none).

        Wire: ``POST /api/v1/push`` ``{"items": [...]}``, resent within the push retry budget
        after lost replies, refused connections, 5xx and empty or garbled 200 replies (the
        ids are fixed before the first attempt, so a resend is answered ``duplicate``).
        """
        lst = items_arg(items, "push()")
        if not lst:
            return []
        if self._buffer is not None and self._session.producer.background_allowed():
            # buffered: see buffer() and queen_sync/producer/
            self._session.check_open()
            return self._session.producer.push(self._name, self._partition, lst, self._buffer)
        # unbuffered; also a buffered push in a uWSGI master before it forks (producer "Fork")
        return push_now(self._session, self._name, self._partition, lst)

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
        (one buffer per queue/partition; see :mod:`queen_sync.producer`). The buffer is
        opened by the first buffered push and keeps these settings until the client is
        closed (:meth:`flush` does not reopen it): ``buffer()`` again with the same settings
        pushes into the same buffer; a ``push()`` with other settings for a queue/partition
        whose buffer is open raises :class:`InvalidInputError` (nothing buffered) rather
        than their being ignored.

        Args:
            message_count: send a batch at this many buffered messages; also the largest
                batch (default 100). A dict ``{"message_count": .., "time_millis": ..}``
                (official-client style) is accepted too.
            time_millis: send a batch this many **milliseconds** after the oldest buffered
                message arrived (default 1000).
            max_bytes: send a batch at this many bytes of encoded items; also the largest
                batch (default 1 MiB): a list push is split to fit, and only an item alone
                over it is sent in a larger batch (alone).
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
        # other settings than an open buffer's are refused at push(), not here: a later
        # .partition() may still pick another queue/partition
        return self._with(
            _buffer=BufferOptions.of(message_count, time_millis, max_bytes, max_messages, block_timeout_millis)
        )

    def flush(self, timeout_millis: Optional[int] = None) -> int:
        """Send this queue/partition's buffered pushes now and wait until the broker confirmed
        them (at most ``timeout_millis`` **milliseconds**; None = until delivered).

        Returns:
            the number of messages still unconfirmed (0 = all delivered, or nothing buffered).

        Raises:
            InvalidInputError: ``timeout_millis`` is negative or not a number.
            ClientClosedError: the client is closed.
        """
        self._session.check_open()
        timeout_arg("timeout_millis", timeout_millis)
        return self._session.producer.flush(self._name, self._partition, timeout_millis)

    flush_buffer = flush

    # ---------------------------------------------------------------- pop settings

    def group(self, name: str) -> "QueueBuilder":
        """Consumer group (each group has its own cursor); without one, queue mode."""
        return self._with(_group=validate_name("consumer group", name))

    def batch(self, n: int) -> "QueueBuilder":
        """Messages per pop (>= 1; default 1)."""
        return self._with(_batch=int_arg("batch", n, 1))

    def partitions(self, n: int) -> "QueueBuilder":
        """How many partitions one wildcard pop may claim (>= 1; broker default 1)."""
        return self._with(_partitions=int_arg("partitions", n, 1))

    def wait(self, enabled: bool = True) -> "QueueBuilder":
        """Long poll: the broker holds the pop until a message arrives or the timeout passes.
        Default: **False for pop()**, True for consume()."""
        return self._with(_wait=bool_arg("wait", enabled))

    def timeout_millis(self, ms: int) -> "QueueBuilder":
        """Long-poll timeout in **milliseconds** (>= 0; default: the client's timeout_millis)."""
        return self._with(_timeout=int_arg("timeout_millis", ms, 0))

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
        each message). consume(): True acks ``completed`` after the handler returns and nacks
        ``failed`` when it raises; False leaves acking to the handler (consume never sends
        ``autoAck=true``). Default for consume(): True, or False when ``on_success`` /
        ``on_error`` is set; an explicit ``auto_ack(True)`` with callbacks keeps acking (the
        callback runs first, then the ack / nack)."""
        return self._with(_auto_ack=bool_arg("auto_ack", enabled))

    def each(self) -> "QueueBuilder":
        """consume(): call the handler with one message at a time, even when ``batch > 1``."""
        return self._with(_each=True)

    def limit(self, n: int) -> "QueueBuilder":
        """consume(): stop after ``n`` handled messages in total across all workers (never
        overshoots): each message given to the handler counts once per delivery, whether it
        succeeded or failed, so a **redelivered** message counts again (one nacked and
        redelivered, or one whose lease expired before it was acked: ``limit(n)`` is not
        "``n`` distinct messages"). Messages popped but never given to the handler (e.g.
        their lease was lost first) do not count. ``n`` is an int >= 1
        (InvalidInputError otherwise); the result's ``handled`` is the count, ``reason``
        ``"limit"`` once it is reached."""
        return self._with(_limit=int_arg("limit", n, 1))

    def idle_millis(self, ms: int) -> "QueueBuilder":
        """consume(): stop after ``ms`` **milliseconds** without a message."""
        return self._with(_idle=int_arg("idle_millis", ms, 1))

    def concurrency(self, n: int) -> "QueueBuilder":
        """consume(): number of worker threads (1 to :data:`~queen_sync.consumer.MAX_CONCURRENCY`,
        1024; default 1). Raises InvalidInputError outside that range."""
        return self._with(_concurrency=int_arg("concurrency", n, 1, MAX_CONCURRENCY))

    def renew_lease(self, enabled: bool = True, interval_millis: Optional[int] = None) -> "QueueBuilder":
        """consume(): keep the leases of unfinished messages alive while they wait or are
        handled, renewing at least every ``interval_millis`` **milliseconds** (default
        10000, at least 500: see below). Each renewal asks for max(5, 3 × interval) seconds
        (the broker's lease is counted in whole seconds). The first renewal of a
        pop's lease is sent min(interval, 500 ms) after the pop (the queue's ``leaseTime``
        may be shorter than the interval), the next ones at half the time the broker's
        ``expiresAt`` leaves, at most ``interval_millis`` apart. A lease already expired at its
        first renewal is logged (WARNING, once per consumer): then shorten the interval or
        lengthen the queue's ``leaseTime``. An interval under 500 ms is refused: the first
        renewal is sent within 500 ms of the pop whatever the interval, and each renewal
        extends the lease by at least 5 s, so a shorter interval only multiplies requests.

        Raises:
            InvalidInputError: ``enabled`` not a bool, or ``interval_millis`` not an int of
                500..31536000000 **milliseconds** (nothing is sent).

        Wire: ``POST /api/v1/lease/{leaseId}/extend`` ``{"seconds": N}``."""
        interval = renew_interval(enabled, interval_millis, self._session.consumers.default_renew_interval_millis)
        return self._with(_renew=enabled, _renew_interval=interval)

    def on_success(self, callback: Callable[[Any, Any], Any]) -> "QueueBuilder":
        """consume(): call ``callback(message_or_list, handler_result)`` after the handler
        returns. Without an explicit ``auto_ack()``, setting on_success or on_error turns
        auto-ack off (the callbacks ack); with ``auto_ack(True)`` the consumer still acks
        ``completed`` after the callback returns (a raising callback counts as a handler
        failure: on_error, then a nack)."""
        check_arity(callback, 2, "on_success() callback (called with (message_or_list, handler_result))")
        return self._with(_on_success=callback)

    def on_error(self, callback: Callable[[Any, BaseException], Any]) -> "QueueBuilder":
        """consume(): call ``callback(message_or_list, exception)`` when the handler (or
        on_success) raises; the exception is then swallowed (the consumer goes on). Turns
        auto-ack off unless ``auto_ack(True)`` was set explicitly: then the message is nacked
        ``failed`` after the callback returns. A callback that raises stops the consumer
        (after that nack, with ``auto_ack(True)``)."""
        check_arity(callback, 2, "on_error() callback (called with (message_or_list, exception))")
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
            timeout_millis=self._timeout if self._timeout is not None else self._session.timeout_millis,
            subscription_mode=self._sub_mode,
            subscription_from=self._sub_from,
            auto_ack=bool(self._auto_ack) if not for_consume else False,
        )

    def _consume_settings(self) -> BuilderSettings:
        """What :meth:`consume` hands the consumer: the pop settings with the consume defaults
        (:meth:`pop_spec` ``for_consume=True``) and the consume-only settings as set (not yet
        defaulted: ``auto_ack`` None means "not set")."""
        return BuilderSettings(
            spec=self.pop_spec(for_consume=True),
            each=bool(self._each),
            auto_ack=self._auto_ack,
            on_success=self._on_success,
            on_error=self._on_error,
            renew_interval_millis=self._renew_interval if self._renew else None,
            limit=self._limit,
            idle_millis=self._idle,
            concurrency=self._concurrency,
        )

    # ---------------------------------------------------------------- pop / consume

    # List[Any], not List[Message]: a caller's List[Dict[str, Any]] annotation (the type
    # before messages were bound) must keep checking, and List[Message] must check too
    def pop(self) -> List[Any]:
        """Pop up to ``batch`` messages once.

        Returns:
            the message dicts (``id, transactionId, partitionId, partition, data, createdAt,
            leaseId, consumerGroup, traceId, producerSub``) as :class:`~queen_sync.Message`
            objects bound to the client (``m.ack()``, ``m.nack(error)``, ``m.renew()``,
            ``m.trace(...)``; otherwise plain dicts; annotate ``List[queen_sync.Message]`` to
            have those calls type-checked); ``[]`` when there is nothing to
            deliver (empty queue, all partitions leased, long poll expired). ``wait`` defaults
            to **False** here.

        Raises:
            BrokerError / QueenHTTPError / QueenConnectionError: real failures (never ``[]``).

        Wire: ``GET /api/v1/pop/queue/{q}[/partition/{p}]?batch=&wait=&timeout=&consumerGroup=
        &partitions=&autoAck=&subscriptionMode=&subscriptionFrom=``.
        """
        return bind_messages(self._session.message_client, wire_messages.pop(self._session, self.pop_spec()))

    @overload
    def consume(
        self,
        handler: Callable[[Any], Any],
        *,
        stop_event: Optional[Any] = ...,
        background: Literal[False] = ...,
        handle_signals: bool = ...,
        drain_timeout_millis: Optional[int] = ...,
        drain_timeout: Optional[float] = ...,
    ) -> "ConsumeResult": ...

    @overload
    def consume(
        self,
        handler: Callable[[Any], Any],
        *,
        stop_event: Optional[Any] = ...,
        background: Literal[True],
        handle_signals: bool = ...,
        drain_timeout_millis: Optional[int] = ...,
        drain_timeout: Optional[float] = ...,
    ) -> "Consumer": ...

    @overload
    def consume(
        self,
        handler: Callable[[Any], Any],
        *,
        stop_event: Optional[Any] = ...,
        background: bool,
        handle_signals: bool = ...,
        drain_timeout_millis: Optional[int] = ...,
        drain_timeout: Optional[float] = ...,
    ) -> Union["ConsumeResult", "Consumer"]: ...

    def consume(
        self,
        handler: Callable[[Any], Any],
        *,
        stop_event: Optional[Any] = None,
        background: bool = False,
        handle_signals: bool = False,
        drain_timeout_millis: Optional[int] = None,
        drain_timeout: Optional[float] = None,
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
        callbacks turn auto-ack off unless ``auto_ack(True)`` is set explicitly (then both
        hold: callback, then ack / nack). ``renew_lease(True)`` keeps leases alive. Connection
        errors are retried forever with backoff; authentication errors (of a pop, an ack, a
        release or a lease renewal) stop the consumer.
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
                :class:`~queen_sync.consumer.Consumer` (``stop(drain_timeout_millis=)``,
                ``join(timeout)``, ``is_running``, live counters).
            handle_signals: turn SIGTERM / SIGINT into a graceful stop and restore the
                previous handlers afterwards (main thread only, else InvalidInputError).
                Default False: no signal handler is installed.
            drain_timeout_millis: **milliseconds** a stop waits for popped messages to be
                handled and acked (default 30000). Then the messages no handler got are released, except
                those queued behind a still-running handler of the same partition: they are
                released once it returns. The blocking form returns at the end of the drain;
                handlers still running then finish in the background (their acks and those
                releases are not in the returned counts: use ``background=True`` and
                ``join()`` for the final ones).
            drain_timeout: deprecated, the same in **seconds**; works for one more release
                with a DeprecationWarning.

        Returns:
            a :class:`~queen_sync.consumer.ConsumeResult` (counts and stop reason), or the
            running :class:`~queen_sync.consumer.Consumer` with ``background=True``.

        Raises:
            ClientClosedError: the client is closed (nothing is started).
            InvalidInputError: bad arguments. In blocking mode: the handler's exception
            (``auto_ack(False)``), an AuthenticationError (of a pop, an ack, a release or a
            lease renewal) or other non-transient pop error;
            QueenConnectionError (or the QueenHTTPError of a 5xx / 429 reply) when
            ``idle_millis`` passed with the broker unreachable (reason ``"unreachable"``);
            KeyboardInterrupt is re-raised after a graceful stop.
        """
        self._session.check_open()  # as every other call: ClientClosedError, not a quiet return
        consumer = self._session.consumers.create(
            self._consume_settings(),
            handler,
            stop_event=stop_event,
            handle_signals=handle_signals,
            drain_timeout_millis=millis_or_deprecated_seconds(
                "drain_timeout_millis", drain_timeout_millis, "drain_timeout", drain_timeout, None
            ),
        )
        if bool_arg("background", background):
            return cast("Consumer", consumer.start())
        return cast("ConsumeResult", consumer.run())


