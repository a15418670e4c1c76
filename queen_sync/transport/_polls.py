"""Long polls in flight, and their interruption by :meth:`Transport.close`.

A pop with ``wait=true`` waits at the broker for up to its ``timeout`` (the broker parks it).
:meth:`Transport.close` must not leave it there: it would block its thread for the rest of
that time, and a message arriving meanwhile would be leased to a client that can no longer
ack or release it (it stays locked for the consumer group until its lease expires). Queen
cancels a parked pop whose client disconnects, so close() shuts down the socket of every
long poll in flight: the broker drops the parked job, the blocked read ends at once, and the
pop raises :class:`~queen_sync.errors.ClientClosedError`. Other calls in flight are left to
finish (a push or an ack under way keeps its reply).

The pools of a :class:`PollRegistry` make connections of classes that report to it when a
request starts in a thread that marked itself (:meth:`PollRegistry.long_poll`); nothing else
of urllib3 is changed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any, Dict, Iterator, Optional, Type

from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

__all__ = ["PollRegistry"]


class PollRegistry:
    """The long polls in flight of one transport: which connection each thread's long poll
    uses. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conns: Dict[int, Any] = {}  # thread id -> its long poll's connection
        self._marked = threading.local()  # .on: this thread's next requests are a long poll
        self.pool_classes: Dict[str, Type[HTTPConnectionPool]] = _pool_classes(self)

    @contextlib.contextmanager
    def long_poll(self) -> Iterator[None]:
        """Mark the requests this thread sends inside the ``with`` as a long poll (one that
        :meth:`interrupt` ends); the mark and the record of its connection end with it."""
        self._marked.on = True
        try:
            yield
        finally:
            self._marked.on = False
            with self._lock:
                self._conns.pop(threading.get_ident(), None)

    def _started(self, conn: Any) -> None:
        """A connection of these pools starts a request (called in the requesting thread)."""
        if getattr(self._marked, "on", False):
            with self._lock:
                self._conns[threading.get_ident()] = conn

    def interrupt(self) -> None:
        """Shut down the socket of every long poll in flight (their reads end at once, and
        the broker drops the parked pops). The sockets are not closed here: their threads'
        urllib3 calls close them."""
        with self._lock:
            conns = list(self._conns.values())
            self._conns.clear()
        for conn in conns:
            sock: Optional[socket.socket] = getattr(conn, "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # already closed: nothing to interrupt
                    pass


def _pool_classes(registry: PollRegistry) -> Dict[str, Type[HTTPConnectionPool]]:
    """HTTP(S) pool classes whose connections report their requests to ``registry``."""

    def reporting(pool_cls: Type[HTTPConnectionPool], conn_cls: Type[HTTPConnection]) -> Type[HTTPConnectionPool]:
        class Conn(conn_cls):  # type: ignore[valid-type, misc]
            def request(self, *args: Any, **kwargs: Any) -> None:
                registry._started(self)
                super().request(*args, **kwargs)

        return type(pool_cls.__name__, (pool_cls,), {"ConnectionCls": Conn})

    return {"http": reporting(HTTPConnectionPool, HTTPConnection),
            "https": reporting(HTTPSConnectionPool, HTTPSConnection)}
