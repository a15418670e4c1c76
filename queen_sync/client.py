"""The :class:`Queen` client: one object, safe to share across threads.

>>> from queen_sync import Queen
>>> with Queen("http://127.0.0.1:6632") as q:                          # doctest: +SKIP
...     q.queue("orders").partition("acme").push({"data": {"id": 1}})
...     msgs = q.queue("orders").group("billing").batch(10).wait(True).pop()
...     q.ack(msgs, True)
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union, overload
from urllib.parse import urlsplit

from . import acks, groups, tracing
from ._session import DEFAULT_ACK_TIMEOUT_MILLIS, Session
from ._validate import bool_arg, int_arg, redact_url, timeout_arg, url_has_userinfo
from .admin import Admin
from .consumer import DEFAULT_RENEW_INTERVAL_MILLIS, BuilderSettings, Consumer, in_consumer_thread, stop_consumers_for_close
from .errors import InvalidInputError
from .producer import DEFAULT_CLOSE_TIMEOUT_MILLIS, BufferManager
from .queues import QueueBuilder
from .running import RunningConsumer, running_consumers
from .streams.runner import stop_runners_for
from .transactions import TransactionBuilder
from .transport import DEFAULT_POOL_MAXSIZE, DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS, Backoff, Response, Transport

__all__ = ["Queen"]

log = logging.getLogger("queen_sync.client")

#: Shortest buffered-push flush :meth:`Queen.close` gives, in milliseconds, even when the
#: consumer drain used up the close timeout.
MIN_CLOSE_FLUSH_MILLIS = 250

Message = Dict[str, Any]
_UrlArg = Union[str, Sequence[str], None]


def _shown(u: str) -> str:
    """A broker URL as error messages show it: credentials masked, at most 300 characters."""
    shown = redact_url(u)
    return shown if len(shown) <= 300 else shown[:300] + "..."


def _parse_urls(url: _UrlArg, urls: _UrlArg) -> List[str]:
    if url is not None and urls is not None:
        raise InvalidInputError("give either url or urls, not both")
    raw: Any = url if url is not None else urls
    if raw is None:
        env = os.environ.get("QUEEN_URL", "").strip()
        if not env:
            raise InvalidInputError("no broker URL: pass url=/urls= or set QUEEN_URL")
        raw = [u for u in (p.strip() for p in env.split(",")) if u]
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, (list, tuple)) or not raw:
        raise InvalidInputError("urls must be a non-empty list of broker URLs, got %r" % (raw,))
    out: List[str] = []
    for u in raw:
        if not isinstance(u, str) or not u.strip():
            raise InvalidInputError("a broker URL must be a non-empty str, got %r" % (u,))
        u = u.strip()
        bad = next((c for c in u if c.isspace() or ord(c) < 32 or ord(c) == 127), None)
        if bad is not None:
            # urlsplit would drop a tab or newline without a word (http://h\nx became http://hx)
            raise InvalidInputError("invalid broker URL %r: it contains %r (no whitespace or control "
                                    "characters)" % (_shown(u), bad))
        if url_has_userinfo(u):  # before parsing: a parse error would quote part of the password
            raise InvalidInputError(
                "credentials in the broker URL are not supported (%r); use bearer_token=" % (_shown(u),))
        try:
            parts = urlsplit(u)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError as exc:
            raise InvalidInputError("invalid broker URL %r: %s" % (_shown(u), str(exc)[:300])) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInputError("a broker URL must look like http(s)://host[:port][/path prefix], got %r" % (_shown(u),))
        if parts.username is not None or parts.password is not None:
            raise InvalidInputError("credentials in the broker URL are not supported; use bearer_token=")
        if parts.query or parts.fragment:
            raise InvalidInputError("a broker URL must not have a query or fragment, got %r" % (_shown(u),))
        clean = "%s://%s%s" % (parts.scheme, parts.netloc, parts.path.rstrip("/"))
        if clean not in out:
            out.append(clean)
    return out


class _ConsumerRegistry:
    """The consumer registry one client hands its builders: it starts
    :class:`~queen_sync.consumer.Consumer` s of this client (queen_sync.consumer keeps the
    process-wide registry that :meth:`Queen.close` stops)."""

    default_renew_interval_millis = DEFAULT_RENEW_INTERVAL_MILLIS

    def __init__(self, client: "Queen") -> None:
        self._client = client

    def create(self, settings: BuilderSettings, handler: Callable[[Any], Any], **options: Any) -> Consumer:
        return Consumer(self._client._session, settings, handler, **options)


class Queen:
    """A blocking, thread-safe client for a Queen MQ broker.

    The work is done by the builders it hands out: :meth:`queue` gives a
    :class:`~queen_sync.QueueBuilder` (``create``, ``push``, ``buffer``, ``pop``,
    ``consume``, ``dlq``, ``delete``), :meth:`transaction` a
    :class:`~queen_sync.TransactionBuilder` (``queue(q).push``, ``ack``, ``commit``), and
    ``consume(handler, background=True)`` a running :class:`~queen_sync.Consumer`. Acks,
    lease renewals and traces of popped messages are :meth:`ack`, :meth:`renew` and
    :meth:`trace`; reads and maintenance are on :attr:`admin`.

    Args:
        url: a broker base URL such as ``"http://host:6632"``, or a list of them. A trailing
            slash is harmless. When neither ``url`` nor ``urls`` is given, ``QUEEN_URL`` is read
            (a comma-separated list is allowed).
        urls: a list of broker base URLs (alternative to ``url``); with several, calls go
            round-robin and fail over to the next URL on connection errors.
        timeout_millis: per-attempt connect/read timeout in **milliseconds** (default 30000).
            Long-poll pops use their own long-poll timeout + 5000 ms as read timeout.
        retry_attempts: total attempts per call (default 3). Connection errors before the
            request was sent, 429 and 503 are always retried (``Retry-After`` honoured);
            lost replies (read errors, timeouts) and 5xx only for idempotent calls (GET
            reads, push, configure, delete, lease extend); pop after a 5xx refusal but not
            after a lost reply; ack and transaction never after sending; 4xx never. Full
            table in :mod:`queen_sync.transport`.
        retry_delay_millis: first backoff delay in milliseconds (default 500), doubling per
            retry with jitter, capped at ``retry_max_delay_millis`` (default 10000). A 429 /
            503 ``Retry-After`` is honoured up to ``retry_max_delay_millis`` per attempt
            (even with a custom ``backoff``).
        bearer_token: sent as ``Authorization: Bearer <token>``; never logged nor shown in repr.
        headers: extra request headers (str names and str values without CR/LF, checked
            here: InvalidInputError), applied last.
        pool_maxsize: connections per broker host (default 64). A thread that finds all of
            them busy waits for one (up to its call's timeout); give at least as many as the
            threads that call at the same time (consumer fetchers + producer senders +
            request threads) to avoid that wait.
        connect_timeout_millis: connect timeout in milliseconds (default ``min(timeout_millis, 10000)``).
        backoff: a :class:`queen_sync.transport.Backoff` (``compute(failures)`` → seconds)
            replacing the default exponential backoff (also paces resends of buffered batches).
        load_balancing_strategy: with several URLs, ``"round-robin"`` (default) or
            ``"affinity"`` (consistent hashing on queue/partition/consumer group).
        affinity_hash_ring: virtual nodes per URL for ``"affinity"`` (default 128).
        health_retry_after_millis: a failed URL is skipped for this many milliseconds (default 5000).
        close_timeout_millis: bound of the whole :meth:`close` (consumer drain, final acks /
            releases and buffered-push flush share it), in milliseconds (default 30000).
        ca_certs: path of a PEM CA bundle for ``https`` brokers signed by a private CA
            (default: the system's trust store; certificates are always verified). Read
            once here: a missing file or one without a PEM certificate raises
            InvalidInputError now, not at the first request.
        cert_file / key_file: PEM client certificate (and key, if separate) for mutual TLS.
        ssl_context: a ready :class:`ssl.SSLContext` for ``https`` brokers, used as is
            (instead of the three above). See :class:`queen_sync.transport.Transport`.
        nan_as_null: send payload NaN / ±Infinity as ``null`` (default False: a push,
            buffered push, transaction or trace holding one raises InvalidInputError naming
            where it sits, before anything is sent; JSON cannot represent them).
        ack_timeout_millis: per-attempt read timeout of the calls that hold a partition
            (acks, releases, lease renewals, a consume worker's own pop), in milliseconds
            (default 5000, at most ``timeout_millis``): a half-open connection costs that
            long, then the consumer retries, instead of the whole ``timeout_millis``.
        push_retry_timeout_millis: time budget of a push's retries, in milliseconds (default
            15000: spans a broker restart of a few seconds, fits a web request); a push is
            retried until then rather than ``retry_attempts`` times (README "Retries").

    Retry safety per call is listed in :mod:`queen_sync.transport`; buffered pushes in
    :mod:`queen_sync.producer`.

    Raises:
        InvalidInputError: no URL, a URL that is not http(s), or a bad option value (a
            ``ca_certs`` / ``cert_file`` / ``key_file`` that is no file, a ``ca_certs`` with
            no PEM certificate).

    The client installs no signal handlers and may be built in any thread. Use it as a
    context manager or call :meth:`close`; every call after ``close()`` raises
    :class:`ClientClosedError`.
    """

    def __init__(
        self,
        url: _UrlArg = None,
        *,
        urls: _UrlArg = None,
        timeout_millis: int = 30000,
        retry_attempts: int = 3,
        retry_delay_millis: int = 500,
        retry_max_delay_millis: int = 10000,
        bearer_token: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
        connect_timeout_millis: Optional[int] = None,
        backoff: Optional[Backoff] = None,
        load_balancing_strategy: str = "round-robin",
        affinity_hash_ring: int = 128,
        health_retry_after_millis: int = 5000,
        close_timeout_millis: int = DEFAULT_CLOSE_TIMEOUT_MILLIS,
        ca_certs: Optional[str] = None,
        cert_file: Optional[str] = None,
        key_file: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        nan_as_null: bool = False,
        ack_timeout_millis: int = DEFAULT_ACK_TIMEOUT_MILLIS,
        push_retry_timeout_millis: int = DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS,
    ) -> None:
        self._urls = _parse_urls(url, urls)
        int_arg("close_timeout_millis", close_timeout_millis, 0)
        int_arg("ack_timeout_millis", ack_timeout_millis, 1)
        # Transport validates the connection options (InvalidInputError) before it opens anything.
        self._transport = Transport(
            self._urls,
            timeout_millis=timeout_millis,
            retry_attempts=retry_attempts,
            retry_delay_millis=retry_delay_millis,
            retry_max_delay_millis=retry_max_delay_millis,
            bearer_token=bearer_token,
            headers=headers,
            pool_maxsize=pool_maxsize,
            connect_timeout_millis=connect_timeout_millis,
            backoff=backoff,
            load_balancing_strategy=load_balancing_strategy,
            affinity_hash_ring=affinity_hash_ring,
            health_retry_after_millis=health_retry_after_millis,
            ca_certs=ca_certs,
            cert_file=cert_file,
            key_file=key_file,
            ssl_context=ssl_context,
            push_retry_timeout_millis=push_retry_timeout_millis,
        )
        self._timeout_millis = self._transport.timeout_millis
        nan_as_null = bool_arg("nan_as_null", nan_as_null)
        self._producer = BufferManager(
            self._transport, close_timeout_millis=close_timeout_millis, backoff=backoff, nan_as_null=nan_as_null
        )
        # what the builders and features get instead of the client (the wire requester & co)
        self._session = Session(
            self._transport,
            self._producer,
            _ConsumerRegistry(self),
            nan_as_null=nan_as_null,
            ack_timeout_millis=ack_timeout_millis,
        )
        self._session.message_client = self  # popped messages ack / renew / trace through this client
        self._admin = Admin(self._session)
        #: internal: send one call as the features do (see :meth:`Session.request`)
        self._request: Callable[..., Response] = self._session.request
        self._close_lock = threading.Lock()
        self._closing = False  # close() started (consumers draining); the session is marked closed after
        self._close_done = threading.Event()
        self._close_timeout_millis = close_timeout_millis
        self._close_deadline: Optional[float] = None  # time.monotonic() deadline of the first close()

    # ------------------------------------------------------------------ basics

    def __repr__(self) -> str:
        return "Queen(urls=%r, timeout_millis=%d%s)" % (
            list(self._urls),
            self._timeout_millis,
            ", closed" if self.closed else "",
        )

    def __enter__(self) -> "Queen":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def urls(self) -> List[str]:
        """The broker base URLs (normalised, without trailing slash)."""
        return list(self._urls)

    @property
    def timeout_millis(self) -> int:
        """The per-attempt timeout, in milliseconds."""
        return self._timeout_millis

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._session.closed

    def close(self, timeout_millis: Optional[int] = None) -> int:
        """Stop this client's consumers gracefully, flush the push buffers, then close the
        connection pool. Idempotent and safe from any thread; after it, every call raises
        :class:`ClientClosedError`.

        Everything shares one deadline, ``timeout_millis`` from the call. In order: (1) every
        consumer of this client running in this process (``consume()``, blocking or
        background) stops fetching (reason ``"closed"``); its in-flight handlers finish and
        are acked; messages no handler got by the drain deadline (the close deadline minus a
        reserve of up to 1 s, at most a quarter of the timeout) are released (ack status
        ``retry``) while the transport is still open. A handler still running at the close
        deadline is abandoned: its ack (and the release of the messages of its partition
        queued behind it) fails once the transport is closed, and the broker redelivers
        those messages when their lease expires. Meanwhile every stream runner of this
        client (:meth:`queen_sync.streams.Stream.run`) stops the same way: the cycle in
        flight finishes, popped but unprocessed messages are released. (2) Buffered pushes are flushed with the
        time left, at least :data:`MIN_CLOSE_FLUSH_MILLIS` (250 ms). (3) The connections are
        closed; a pop waiting at the broker (long poll) in another thread is interrupted and
        raises :class:`ClientClosedError` (the broker drops the parked pop: nothing is leased
        to this client); other calls in flight finish. So close() returns within ``timeout_millis`` + 250 ms (plus the time a
        send already under way needs to give up).

        **Broker unreachable with buffered pushes**: close() keeps resending for the whole
        timeout (default 30000 ms) before it gives the messages up (returned and reported,
        never dropped sooner), and so does interpreter exit for a client never closed (the
        producer's ``atexit`` hook, bounded by ``close_timeout_millis``). To wait less, pass
        ``timeout_millis`` or construct ``Queen(close_timeout_millis=...)``. The resends log
        one WARNING per batch (then DEBUG) and the close one ERROR with what is left.

        Called from inside a handler (or callback) of a consumer of this client, it does not
        wait for that handler: it requests the stops and returns 0 at once, and a
        ``queen-close`` thread finishes (1)-(3) once the handler has returned and been acked,
        or at the deadline (see :attr:`unsent_on_close`). A call while another close is under
        way waits for it (from a consumer thread: returns at once).

        Args:
            timeout_millis: bound of the whole close, in milliseconds (default: the
                ``close_timeout_millis`` option, 30000).

        Returns:
            the number of buffered messages that could not be delivered in time (0 = none);
            also logged at ERROR and kept in :attr:`unsent_on_close`. A second call returns
            the same number.

        Raises:
            InvalidInputError: ``timeout_millis`` is not an int >= 0.
        """
        limit = self._close_timeout_millis if timeout_millis is None else int_arg("timeout_millis", timeout_millis, 0)
        deadline = time.monotonic() + limit / 1000.0
        own = in_consumer_thread(self._session)
        with self._close_lock:
            first = not self._closing
            self._closing = True
            if first:
                self._close_deadline = deadline
        if not first:
            if not own:
                # the first close ends by its deadline (+ the flush minimum and a margin)
                until = min(deadline, self._close_deadline) if self._close_deadline else deadline
                self._close_done.wait(max(0.0, until - time.monotonic()) + MIN_CLOSE_FLUSH_MILLIS / 1000.0 + 5.0)
            return self._producer.unsent_on_close or 0
        try:
            wait_consumers = stop_consumers_for_close(self._session, limit, deadline)
        except BaseException:
            self._finish_close(lambda: None, deadline)
            raise
        if own:
            threading.Thread(
                target=self._finish_close, args=(wait_consumers, deadline), name="queen-close"
            ).start()
            return 0
        return self._finish_close(wait_consumers, deadline)

    def _finish_close(self, wait_consumers: Any, deadline: float) -> int:
        """Steps (2)-(3) of :meth:`close` after waiting for the consumers (until ``deadline``,
        a ``time.monotonic()`` value)."""
        unsent = 0
        try:
            # stream runners stop while the consumers drain (both still have the transport)
            stop_runners_for(self._session, int(max(0.0, deadline - time.monotonic()) * 1000.0))
            wait_consumers()
        finally:
            with self._close_lock:
                self._session.mark_closed()
            try:
                left_ms = int(max(0.0, deadline - time.monotonic()) * 1000.0)
                unsent = self._producer.close(max(MIN_CLOSE_FLUSH_MILLIS, left_ms))
            finally:
                self._transport.close()
                self._close_done.set()
        return unsent

    @property
    def unsent_on_close(self) -> Optional[int]:
        """Buffered messages :meth:`close` could not deliver (None before close)."""
        return self._producer.unsent_on_close

    def flush_all_buffers(self, timeout_millis: Optional[int] = None) -> int:
        """Send every buffered push now and wait until the broker confirmed them.

        Args:
            timeout_millis: how long to wait, in milliseconds (None = until delivered).

        Returns:
            the number of messages still unconfirmed when the wait ended (0 = all delivered).

        Raises:
            InvalidInputError: ``timeout_millis`` is negative or not a number.
            ClientClosedError: the client is closed.
        """
        self._check_open()
        return self._producer.flush_all(timeout_arg("timeout_millis", timeout_millis))

    def get_buffer_stats(self) -> Dict[str, Any]:
        """Statistics of the push buffers: ``{activeBuffers, totalBufferedMessages (unsent),
        oldestBufferAge, flushesPerformed (batches sent), delivered, duplicates, failed,
        retries, buffers: {"queue/partition": {...}}}`` (see
        :meth:`queen_sync.producer.BufferManager.stats`). ``oldestBufferAge`` (and each
        buffer's ``oldest_age_millis``) is in **milliseconds**: the age of the oldest message
        not yet delivered, since its push, whether waiting or in a batch in flight / being
        resent (so it keeps growing while the broker is down); 0.0 when nothing is unsent."""
        return self._producer.stats()

    def get_transport_stats(self) -> Dict[str, Any]:
        """Transport counters and URL health: ``{retries, failovers, errors, urls: [{url, healthy}]}``."""
        return self._transport.stats()

    def running_consumers(self) -> List[RunningConsumer]:
        """What this client runs in the background in this process: one read-only
        :class:`~queen_sync.running.RunningConsumer` (``kind`` ``"consumer"`` or ``"stream"``,
        ``queue``, ``group``, ``query``, ``threads`` alive, ``started_at_millis``: Unix epoch
        milliseconds) per running consumer
        (``consume()``, blocking or ``background=True``; listed until its last thread ended,
        handlers included) and per running stream runner (``Stream.run()``; until its stop
        was asked for), consumers first. Empty after :meth:`close`. A snapshot: sends
        nothing, waits for nothing; also works on a closed client."""
        return running_consumers(self._session)

    def _check_open(self) -> None:
        self._session.check_open()

    # ------------------------------------------------------------------ builders

    def queue(self, name: str) -> QueueBuilder:
        """A builder for queue ``name`` (push, pop, consume, create, delete).

        Raises:
            InvalidInputError: the name is empty or has characters outside ``[A-Za-z0-9._~-]``.
            ClientClosedError: the client is closed.
        """
        self._check_open()
        return QueueBuilder(self._session, name)

    def transaction(self) -> TransactionBuilder:
        """A builder for an atomic bundle of pushes and acks (``POST /api/v1/transaction``)."""
        self._check_open()
        return TransactionBuilder(self._session)

    # ------------------------------------------------------------------ admin, groups, traces
    # (implemented in admin.py, groups.py, tracing.py)

    @property
    def admin(self) -> Admin:
        """The :class:`~queen_sync.admin.Admin` object (one per client): overview, queues,
        messages, status, consumer groups, traces, maintenance, health."""
        self._check_open()
        return self._admin

    def trace(
        self,
        message: Message,
        names: Union[str, Sequence[str], None] = None,
        data: Optional[Mapping[str, Any]] = None,
        event_type: str = "info",
        *,
        group: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Record a trace on a popped or consumed message; see :func:`queen_sync.tracing.trace`.

        Args:
            message: the message dict (its ``transactionId`` and ``partitionId`` are sent).
            names: a trace name or a list of them, or None.
            data: the trace content, a JSON dict (required).
            event_type: a free label, default ``"info"``.
            group: the consumer group the trace is recorded under (``consumerGroup`` on the
                wire; ``"__QUEUE_MODE__"`` for queue mode); default: the message's own
                ``consumerGroup``, queue mode when it has none.

        Returns ``{success: True, traceId}``. Raises InvalidInputError (no ``data`` dict, a
        message without ids, bad names or event type, a ``group`` that is not a valid
        consumer-group name; nothing sent) or BrokerError (``Message not found``).
        Wire: ``POST /api/v1/traces`` ``{transactionId, partitionId, consumerGroup,
        traceNames, eventType, data}``.
        """
        return tracing.trace(self._session, message, names, data, event_type, group=group)

    def delete_consumer_group(
        self, group: str, delete_metadata: bool = True, *, queue: Optional[str] = None
    ) -> Dict[str, Any]:
        """Drop a consumer group's cursors on every queue (or on ``queue`` only); re-created
        under the same name it reads again from its subscription start (the whole history by
        default). See :func:`queen_sync.groups.delete_consumer_group`.
        Wire: ``DELETE /api/v1/consumer-groups/{group}[/queues/{queue}]?deleteMetadata=``."""
        return groups.delete_consumer_group(self._session, group, delete_metadata, queue=queue)

    def update_consumer_group_timestamp(self, group: str, timestamp: Any) -> Dict[str, Any]:
        """Move a consumer group's subscription timestamp (ISO-8601 text or datetime); see
        :func:`queen_sync.groups.update_consumer_group_timestamp`.
        Wire: ``POST /api/v1/consumer-groups/{group}/subscription``."""
        return groups.update_consumer_group_timestamp(self._session, group, timestamp)

    # ------------------------------------------------------------------ ack

    @overload
    def ack(
        self,
        message: Message,
        status: Union[bool, str] = ...,
        context: Optional[Mapping[str, Any]] = ...,
        *,
        group: Optional[str] = ...,
        error: Optional[str] = ...,
    ) -> Dict[str, Any]: ...

    @overload
    def ack(
        self,
        message: Sequence[Message],
        status: Union[bool, str] = ...,
        context: Optional[Mapping[str, Any]] = ...,
        *,
        group: Optional[str] = ...,
        error: Optional[str] = ...,
    ) -> List[Dict[str, Any]]: ...

    def ack(
        self,
        message: Union[Message, Sequence[Message]],
        status: Union[bool, str] = True,
        context: Optional[Mapping[str, Any]] = None,
        *,
        group: Optional[str] = None,
        error: Optional[str] = None,
    ) -> Union[Dict[str, Any], List[Dict[str, Any]]]:
        """Acknowledge (or nack) one popped message or a list of them.

        Args:
            message: a message dict as returned by ``pop()`` (needs ``transactionId`` and
                ``partitionId``; its ``leaseId`` is sent so the broker fences the ack), or a
                list of them. A message's own ``_status`` / ``_error`` keys override
                ``status`` / the context error.
            status: ``True``/``"completed"``/``"success"`` (done), ``False``/``"failed"``
                (nack: redelivered until the queue's retry limit, then dead-letter queue),
                ``"retry"`` (redeliver without counting) or ``"dlq"`` (straight to the DLQ).
            context: optional ``{"group": g}`` or ``{"consumer_group": g}`` (consumer group),
                and ``{"error": "text"}`` (nack reason). Without a group, each message's own
                ``consumerGroup`` is used (queue mode for ``__QUEUE_MODE__``).
            group: keyword form of the context's group: ``q.ack(msg, status="completed",
                group="billing")``.
            error: keyword form of the context's error (the nack reason):
                ``q.ack(msg, status="failed", error="bad total")``. A popped or consumed
                :class:`~queen_sync.Message` also has ``msg.ack()`` / ``msg.nack(error)``.

        Returns:
            for one message, the broker's result dict ``{index, transactionId, success, error,
            queueName, partitionName, leaseReleased, dlq}``; for a list, the list of those in
            input order (``index`` is the input position). An empty list returns ``[]``
            without a request.

        Raises:
            InvalidInputError: a bad message, status, context or keyword (or a ``group`` /
                ``error`` that differs from the context's), or a message popped with
                ``auto_ack(True)`` (``leaseId`` empty: the broker acked it at the pop, and an
                ack without its lease would be applied unchecked), or a list naming one
                message twice (same ``transactionId`` and ``partitionId``, whatever its
                ``leaseId``) for one consumer group: the error names both positions (nothing
                sent).
            AckError: the broker refused one or more items (``.results``, ``.failed``); for
                a list, every batch is still sent first. A refusal with ``Invalid or expired
                lease`` of a :class:`~queen_sync.Message` this client nacked (or released with
                ``retry``) before says so in the error text: that released its pop's lease, so
                ack the redelivered copy instead.
            BrokerError / QueenConnectionError: the call itself failed; for a list that
                took more than one call, ``.applied`` holds the results of the calls
                answered before (do not resend those acks).

        Wire: one message → ``POST /api/v1/ack``; a list → one ``POST /api/v1/ack/batch`` per
        effective consumer group (the broker applies the body-level group to every item),
        each partition's messages in pop order (``createdAt``, ``id``): an ack moves the
        partition's cursor to that message, also backwards. A partition's acks that follow a
        nack (``failed`` / ``retry``) in the list wait for its outcome: sent in a second call
        if it went to the DLQ, else answered as released (a nack or retry: redelivered with
        it) or refused as not sent (any other: the broker redelivers it) — in one call the
        broker would move the cursor past the released message and lose it.
        """
        return acks.ack(self._session, message, status, context, group=group, error=error)

    # ------------------------------------------------------------------ renew

    # a str is also a Sequence[str]; the first overload wins for it, as at run time
    @overload
    def renew(  # type: ignore[overload-overlap]
        self, target: Union[str, Message], seconds: Optional[int] = ...
    ) -> Dict[str, Any]: ...

    @overload
    def renew(self, target: Sequence[Union[str, Message]], seconds: Optional[int] = ...) -> List[Dict[str, Any]]: ...

    def renew(
        self,
        target: Union[str, Message, Sequence[Union[str, Message]]],
        seconds: Optional[int] = None,
    ) -> Union[Dict[str, Any], List[Dict[str, Any]]]:
        """Extend leases.

        Args:
            target: a lease id (str), a popped message (its ``leaseId``), or a list of them;
                lease ids are de-duplicated in order (one pop shares one lease).
            seconds: new lease length in **seconds** (the broker default is 60; its
                ``{"seconds": N}`` field, hence the unit), e.g. ``q.renew(msg, seconds=30)``
                or ``msg.renew(30)``: an int from 1 to 2147483647 (the broker reads it as a
                32-bit integer). The broker sets expiry to max(current expiry, now + seconds).

        Returns:
            the broker's result dict ``{index, leaseId, success, error, expiresAt}`` for a
            single target, or a list of them (one per distinct lease) for a list.

        Raises:
            InvalidInputError: no lease id (e.g. a message popped with ``auto_ack(True)``),
                or ``seconds`` not an int of 1..2147483647; nothing is sent.
            LeaseError: the broker refused a renewal (``Lease not found``, ``Lease already
                expired``); for a list, every lease is tried first. ``.body`` holds the results.

        Wire: ``POST /api/v1/lease/{leaseId}/extend`` with ``{}`` or ``{"seconds": N}``, one per lease.
        """
        return acks.renew(self._session, target, seconds)
