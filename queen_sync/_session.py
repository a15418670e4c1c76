"""What one :class:`~queen_sync.Queen` client lends its features: a :class:`Session`.

The session is the client's wire requester (it refuses every call once the client is
closed, then sends through the transport), plus what builders need besides: the buffer
manager of buffered pushes, the default long-poll timeout, the retry backoff, the
queue-option memory of ``update_config``, the client's consumer registry, the
:class:`~queen_sync.message.MessageClient` popped messages are bound to (so ``msg.ack()``
works) and the per-attempt timeout of the calls that hold a partition
(``ack_timeout_millis``). Features receive a session, never the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol

from .errors import ClientClosedError
from .options import QueueOptionMemory
from .transport import Backoff, Response, Transport

if TYPE_CHECKING:  # pragma: no cover
    from .message import MessageClient
    from .producer import BufferManager

__all__ = ["Session", "ConsumerRegistry", "DEFAULT_ACK_TIMEOUT_MILLIS"]

#: Default per-attempt timeout of acks, releases and lease renewals, in milliseconds. A
#: healthy broker answers an ack in milliseconds (a busy one, a batch of a thousand, well
#: under a second); 5 s leaves a wide margin for that while a half-open connection costs 5 s
#: per attempt, not the 30 s HTTP timeout, during which the partition cannot advance.
DEFAULT_ACK_TIMEOUT_MILLIS = 5000


class ConsumerRegistry(Protocol):
    """Starts consumers for the builders of one client (``QueueBuilder.consume``)."""

    #: the lease renewal interval ``renew_lease()`` uses by default, in milliseconds
    default_renew_interval_millis: int

    def create(self, settings: Any, handler: Callable[[Any], Any], **options: Any) -> Any:
        """A new, not yet started consumer of a builder's consume ``settings`` (a
        ``queen_sync.consumer.BuilderSettings``; options as ``consume()``)."""
        ...


class Session:
    """One client's requester and shared parts (see the module docstring). Thread-safe."""

    def __init__(
        self,
        transport: Transport,
        producer: "BufferManager",
        consumers: ConsumerRegistry,
        options: Optional[QueueOptionMemory] = None,
        *,
        nan_as_null: bool = False,
        ack_timeout_millis: int = DEFAULT_ACK_TIMEOUT_MILLIS,
    ) -> None:
        self.transport = transport
        #: payload NaN / ±Infinity are sent as ``null`` instead of refused (``Queen(nan_as_null=)``)
        self.nan_as_null = nan_as_null
        self._ack_timeout_millis = ack_timeout_millis
        self.producer = producer
        self.consumers = consumers
        self.options = options if options is not None else QueueOptionMemory()
        # a plain flag, no lock: nothing a fork could leave held (see queen_sync._fork)
        self._closed = False
        #: what ``pop()`` binds its messages to (the client, set by it); None: unbound
        self.message_client: Optional["MessageClient"] = None

    def __repr__(self) -> str:
        return "Session(urls=%r%s)" % (list(self.transport.urls), ", closed" if self.closed else "")

    @property
    def closed(self) -> bool:
        """True once the client is closed (:meth:`mark_closed`)."""
        return self._closed

    def mark_closed(self) -> None:
        """From now on every call raises :class:`ClientClosedError` (the transport stays
        open for the final flush of buffered pushes)."""
        self._closed = True

    def check_open(self) -> None:
        """Raise :class:`ClientClosedError` when the client is closed."""
        if self._closed:
            raise ClientClosedError("the Queen client is closed")

    @property
    def timeout_millis(self) -> int:
        """The client's per-attempt timeout, in milliseconds (the default long-poll timeout)."""
        return self.transport.timeout_millis

    @property
    def ack_timeout_millis(self) -> int:
        """The per-attempt timeout of acks, releases and lease renewals, in milliseconds (the
        ``ack_timeout_millis`` option, at most the client's ``timeout_millis``)."""
        return min(self._ack_timeout_millis, self.transport.timeout_millis)

    @property
    def backoff(self) -> Backoff:
        """The client's retry backoff."""
        return self.transport.backoff

    @property
    def pool_maxsize(self) -> int:
        """The client's ``pool_maxsize``: connections per broker host."""
        return self.transport.pool_maxsize

    def pause(self, seconds: float) -> bool:
        """Wait ``seconds``; True when the transport was closed meanwhile (stop waiting)."""
        return self.transport._pause(seconds)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Optional[bytes] = None,
        query: Optional[Mapping[str, Any]] = None,
        idempotent: bool = False,
        timeout_millis: Optional[int] = None,
        retry: Optional[str] = None,
        affinity_key: Optional[str] = None,
        accept: Optional[Callable[[bytes], Any]] = None,
        long_poll: bool = False,
        on_retry: Optional[Callable[[Exception, int], Any]] = None,
    ) -> Response:
        """Send one call through the transport (see :meth:`Transport.request`), unless the
        client is closed (ClientClosedError)."""
        self.check_open()
        return self.transport.request(
            method,
            path,
            body=body,
            query=query,
            idempotent=idempotent,
            timeout_millis=timeout_millis,
            retry=retry,
            affinity_key=affinity_key,
            accept=accept,
            long_poll=long_poll,
            on_retry=on_retry,
        )
