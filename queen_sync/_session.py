"""What one :class:`~queen_sync.Queen` client lends its features: a :class:`Session`.

The session is the client's wire requester (it refuses every call once the client is
closed, then sends through the transport), plus what builders need besides: the buffer
manager of buffered pushes, the default long-poll timeout, the retry backoff, the
queue-option memory of ``update_config`` and the client's consumer registry. Features
receive a session, never the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol

from .errors import ClientClosedError
from .options import QueueOptionMemory
from .transport import Backoff, Response, Transport

if TYPE_CHECKING:  # pragma: no cover
    from .producer import BufferManager

__all__ = ["Session", "ConsumerRegistry"]


class ConsumerRegistry(Protocol):
    """Starts consumers for the builders of one client (``QueueBuilder.consume``)."""

    #: the lease renewal interval ``renew_lease()`` uses by default, in milliseconds
    default_renew_interval_millis: int

    def create(self, builder: Any, handler: Callable[[Any], Any], **options: Any) -> Any:
        """A new, not yet started consumer of ``builder``'s settings (options as ``consume()``)."""
        ...


class Session:
    """One client's requester and shared parts (see the module docstring). Thread-safe."""

    def __init__(
        self,
        transport: Transport,
        producer: "BufferManager",
        consumers: ConsumerRegistry,
        options: Optional[QueueOptionMemory] = None,
    ) -> None:
        self.transport = transport
        self.producer = producer
        self.consumers = consumers
        self.options = options if options is not None else QueueOptionMemory()
        # a plain flag, no lock: nothing a fork could leave held (see queen_sync._fork)
        self._closed = False

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
    def backoff(self) -> Backoff:
        """The client's retry backoff."""
        return self.transport.backoff

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
        )
