"""HTTP layer of the embedded broker: routing, validation, fault injection, start/stop."""

from __future__ import annotations

import logging
import os
import select
import socket
import ssl
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Set, Tuple
from urllib.parse import parse_qsl

from . import _admin, _streams
from ._faults import FaultInjector, RequestLog
from ._state import BrokerState
from ._util import BadRequest as _BadRequest
from ._util import EMPTY_BODY, NumberOverflow, dumps, int_param, json_error_text, loads

logger = logging.getLogger("queen_sync.testing")

NOT_FOUND_HTML = b"<html><body><h1>File Not Found</h1><hr><i>uWebSockets/20 Server</i></body></html>"
HANG_CAP_SECONDS = 600.0

_STATUS_TEXT = {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request", 404: "Not Found",
                429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
                503: "Service Unavailable", 504: "Gateway Timeout"}
_CORS = (b"Access-Control-Allow-Origin: *\r\n"
         b"Access-Control-Allow-Methods: GET, POST, PUT, DELETE, OPTIONS\r\n"
         b"Access-Control-Allow-Headers: Content-Type, Authorization\r\n")


class _Raw(object):
    """A non-JSON reply: raw bytes, optional content type."""

    __slots__ = ("body", "content_type")

    def __init__(self, body: bytes, content_type: Optional[str]) -> None:
        self.body = body
        self.content_type = content_type


class _Hang(object):
    """Marker: never answer (the real broker's empty batch ack)."""


HANG = _Hang()


_date_cache = [0, b""]


def _date_header() -> bytes:
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[0] = now
        _date_cache[1] = ("Date: %s\r\n" % formatdate(now, usegmt=True)).encode("ascii")
    return _date_cache[1]  # type: ignore[return-value]


def _undelivered_lease(method: str, path: str, status: int, reply: Any) -> Optional[str]:
    """The lease id of a pop reply that hands out messages under a lease, else None."""
    if method != "GET" or status != 200 or not path.startswith("/api/v1/pop/"):
        return None
    if not isinstance(reply, dict) or not reply.get("messages"):
        return None
    lease_id = reply.get("leaseId")
    return lease_id if isinstance(lease_id, str) and lease_id else None


class Router(object):
    """Maps (method, path, query, body) to ``(status, body)`` using a :class:`BrokerState`."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state

    # -- body helpers
    @staticmethod
    def parse_body(raw: bytes) -> Any:
        if not raw:
            raise _BadRequest("Empty request body")
        try:
            return loads(raw)
        except NumberOverflow as exc:
            raise _BadRequest("Invalid JSON: " + exc.text)
        except (ValueError, UnicodeDecodeError):
            raise _BadRequest("Invalid JSON: " + json_error_text(raw))

    def handle(self, method: str, path: str, query: str, raw: bytes,
               disconnected: Optional[Callable[[], bool]] = None) -> Tuple[int, Any]:
        try:
            status, reply = self._handle(method, path, query, raw, disconnected)
        except _BadRequest as exc:
            return 400, {"error": exc.text}
        self.state.metrics.observe(method, path, status, reply)
        return status, reply

    def _params(self, query: str) -> Dict[str, str]:
        out: Dict[str, str] = {}
        if query:
            for k, v in parse_qsl(query, keep_blank_values=True):
                if k not in out:
                    out[k] = v
        return out

    def _handle(self, method: str, path: str, query: str, raw: bytes,
                disconnected: Optional[Callable[[], bool]]) -> Tuple[int, Any]:
        st = self.state
        if method == "OPTIONS":
            return 200, _Raw(b"", None)
        if method == "POST":
            if path == "/api/v1/push":
                return self._push(self.parse_body(raw))
            if path == "/api/v1/ack":
                return self._ack(self.parse_body(raw))
            if path == "/api/v1/ack/batch":
                return self._ack_batch(self.parse_body(raw))
            if path == "/api/v1/transaction":
                return self._transaction(self.parse_body(raw))
            if path in _streams.ROUTES:
                return _streams.route(st, path, self.parse_body(raw))
            if path == "/api/v1/configure":
                body = self.parse_body(raw)
                if not isinstance(body, dict) or not isinstance(body.get("queue"), str):
                    raise _BadRequest("queue is required")
                return st.configure(body)
            if path.startswith("/api/v1/lease/") and path.endswith("/extend"):
                lease_id = path[len("/api/v1/lease/"):-len("/extend")]
                if lease_id and "/" not in lease_id:
                    body = self.parse_body(raw)
                    seconds = body.get("seconds", 60) if isinstance(body, dict) else 60
                    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                        seconds = 60
                    return st.extend(lease_id, int(seconds))
        elif method == "GET":
            if path.startswith("/api/v1/pop/queue/"):
                rest = path[len("/api/v1/pop/queue/"):]
                parts = rest.split("/")
                if len(parts) == 1 and parts[0]:
                    return st.pop(parts[0], None, self._params(query), disconnected)
                if len(parts) == 3 and parts[0] and parts[1] == "partition" and parts[2]:
                    return st.pop(parts[0], parts[2], self._params(query), disconnected)
            elif path == "/health":
                return 200, _admin.health(st)
            elif path == "/api/v1/dlq":
                p = self._params(query)
                limit = int_param(p.get("limit"), 100)
                offset = int_param(p.get("offset"), 0)
                return st.dlq_rows(p.get("queue") or None, p.get("consumerGroup") or None, limit, offset)
        elif method == "DELETE":
            if path.startswith("/api/v1/resources/queues/"):
                name = path[len("/api/v1/resources/queues/"):]
                if "/" not in name:
                    return st.delete_queue(name)
        res = _admin.route(st, self, method, path, self._params(query), raw)
        if res is not None:
            return res
        return 404, _Raw(NOT_FOUND_HTML, None)

    # -- core routes
    def _push(self, body: Any) -> Tuple[int, Any]:
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise _BadRequest("items array is required")
        if not items:
            return 201, []
        for it in items:
            if not isinstance(it, dict) or not isinstance(it.get("queue"), str):
                raise _BadRequest("Queue must be a string")
            for key, text in (("partition", "Partition must be a string"),
                              ("transactionId", "TransactionId must be a string"),
                              ("traceId", "TraceId must be a string")):
                v = it.get(key)
                if v is not None and not isinstance(v, str):
                    raise _BadRequest(text)
        return self.state.push(items)

    def _ack(self, body: Any) -> Tuple[int, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("transactionId"), str):
            raise _BadRequest("transactionId is required")
        if not isinstance(body.get("partitionId"), str):
            raise _BadRequest("partitionId is required to ensure message uniqueness")
        return self.state.ack([body])

    def _ack_batch(self, body: Any) -> Tuple[int, Any]:
        acks = body.get("acknowledgments") if isinstance(body, dict) else None
        if not isinstance(acks, list):
            raise _BadRequest("acknowledgments array is required")
        if not acks:
            return 0, HANG
        for it in acks:
            if not isinstance(it, dict) or not isinstance(it.get("transactionId"), str):
                raise _BadRequest("Each acknowledgment must have a valid transactionId string")
            if not isinstance(it.get("partitionId"), str):
                raise _BadRequest("Each acknowledgment must have a valid partitionId string")
        group = body.get("consumerGroup")
        return self.state.ack(acks, group if isinstance(group, str) else None, batch_route=True)

    def _transaction(self, body: Any) -> Tuple[int, Any]:
        ops = body.get("operations") if isinstance(body, dict) else None
        if not isinstance(ops, list):
            raise _BadRequest("operations array required")
        if not ops:
            raise _BadRequest("operations array cannot be empty")
        return self.state.transaction(ops)


class _Headers(dict):
    """Request headers keyed by lower-case name; ``get`` is case-insensitive."""

    def get(self, key: str, default: Any = None) -> Any:
        return dict.get(self, key.lower(), default)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uWebSockets/20"
    sys_version = ""
    server: "_Server"
    raw_requestline: bytes  # set by BaseHTTPRequestHandler.handle_one_request (not in typeshed)

    def setup(self) -> None:
        BaseHTTPRequestHandler.setup(self)
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logger.debug("%s %s", self.address_string(), format % args)

    def parse_request(self) -> bool:
        """Lean replacement of the stdlib parser (which builds an email.Message per request)."""
        line = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        self.requestline = line
        parts = line.split()
        self.request_version = "HTTP/1.0"
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self.close_connection = True
            self.send_error(400, "Bad request syntax (%r)" % line)
            return False
        self.command, self.path, version = parts
        self.request_version = version
        headers = _Headers()
        count = 0
        while True:
            raw = self.rfile.readline(65537)
            if raw in (b"\r\n", b"\n", b""):
                break
            count += 1
            if count > 200 or len(raw) > 65536:
                self.close_connection = True
                self.send_error(431, "Request header fields too large")
                return False
            name, sep, value = str(raw, "iso-8859-1").partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        self.headers = headers  # type: ignore[assignment]
        conn = headers.get("connection", "").lower()
        if version == "HTTP/1.1":
            self.close_connection = conn == "close"
        else:
            self.close_connection = conn != "keep-alive"
        if headers.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def _read_body(self) -> bytes:
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while True:
                        trailer = self.rfile.readline(65537)
                        if trailer in (b"\r\n", b"\n", b""):
                            break
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _disconnected(self) -> bool:
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            if isinstance(self.connection, ssl.SSLSocket):
                # TLS sockets cannot peek: peek the TCP stream under it (b"" = the peer closed)
                raw = socket.socket(fileno=self.connection.fileno())
                try:
                    return raw.recv(1, socket.MSG_PEEK) == b""
                finally:
                    raw.detach()
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _dispatch(self) -> None:
        srv = self.server
        broker = srv.broker
        raw_path = self.path
        path, _, query = raw_path.partition("?")
        method = self.command
        broker.requests.record(method, path)
        body = self._read_body()
        fault = broker.faults.match(method, path, body)
        if fault is not None:
            logger.debug("fault %s on %s %s", fault.action, method, path)
            if fault.action == "drop_before":
                self._drop()
                return
            if fault.action == "status":
                payload = dumps(fault.body if fault.body is not None else {"error": "injected fault"})
                extra = b""
                if fault.retry_after is not None:
                    ra = fault.retry_after
                    extra = ("Retry-After: %s\r\n" % (int(ra) if float(ra).is_integer() else ra)).encode()
                self._write(fault.status, payload, "application/json", extra)
                return
            if fault.action == "blackhole":
                self._hang()
                return
            if fault.action == "delay":
                time.sleep(fault.delay_ms / 1000.0)
        status, reply = broker.router.handle(method, path, query, body, self._disconnected)
        if reply is HANG:
            self._hang()
            return
        if fault is not None and fault.action == "drop_after":
            self._drop()
            return
        if isinstance(reply, _Raw):
            self._write(status, reply.body, reply.content_type)
            return
        if reply is EMPTY_BODY:
            self._write(status, b"", "application/json")
            return
        lease_id = _undelivered_lease(method, path, status, reply)
        if lease_id is not None and self._disconnected():
            # The caller hung up while its pop was being served: give the lease back rather
            # than leave the messages locked for leaseTime on a dead connection.
            logger.debug("pop caller gone; releasing lease %s", lease_id)
            broker.state.release_lease(lease_id)
            self.close_connection = True
            return
        written = self._write(status, dumps(reply), "application/json",
                              b"Connection: close\r\n" if status == 204 else b"")
        if not written and lease_id is not None:
            broker.state.release_lease(lease_id)
        if status == 204:
            self.close_connection = True

    def _write(self, status: int, body: bytes, ctype: Optional[str], extra: bytes = b"") -> bool:
        """Send one response; False (and the connection is closed) when the socket failed."""
        head = b"HTTP/1.1 %d %s\r\n" % (status, _STATUS_TEXT.get(status, "Status").encode())
        if ctype is not None:
            head += b"Content-Type: " + ctype.encode() + b"\r\n" + _CORS
        head += b"uWebSockets: 20\r\n" + _date_header() + extra
        head += b"Content-Length: %d\r\n\r\n" % len(body)
        if self.command == "HEAD":
            body = b""
        try:
            self.wfile.write(head + body)
        except OSError:
            self.close_connection = True
            return False
        return True

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _hang(self) -> None:
        stop = self.server.broker._stop_event
        deadline = time.monotonic() + HANG_CAP_SECONDS
        while not stop.is_set() and time.monotonic() < deadline:
            if self._disconnected():
                break
            stop.wait(0.5)
        self._drop()

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_OPTIONS = do_HEAD = _dispatch


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024
    block_on_close = False

    def __init__(self, addr: Tuple[str, int], broker: "EmbeddedBroker") -> None:
        self.broker = broker
        self.ssl_context = broker.ssl_context
        self.open_sockets: Set[socket.socket] = set()
        self.sock_lock = threading.Lock()
        ThreadingHTTPServer.__init__(self, addr, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.sock_lock:
            self.open_sockets.add(request)
        ThreadingHTTPServer.process_request(self, request, client_address)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is None:
            ThreadingHTTPServer.finish_request(self, request, client_address)
            return
        # the TLS handshake runs in the connection's thread, not in the accept loop
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (OSError, ValueError) as exc:  # e.g. no or a bad client certificate
            logger.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        with self.sock_lock:
            self.open_sockets.discard(request)  # wrap_socket detached it
            self.open_sockets.add(tls)
        try:
            ThreadingHTTPServer.finish_request(self, tls, client_address)
        finally:
            self.shutdown_request(tls)

    def shutdown_request(self, request: Any) -> None:
        with self.sock_lock:
            self.open_sockets.discard(request)
        ThreadingHTTPServer.shutdown_request(self, request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("connection error from %s", client_address, exc_info=True)

    def close_all(self) -> None:
        with self.sock_lock:
            socks = list(self.open_sockets)
            self.open_sockets.clear()
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass


class EmbeddedBroker(object):
    """An in-memory, thread-safe HTTP server answering like a Queen 0.15 broker.

    Args:
        host: interface to listen on (default ``"127.0.0.1"``).
        port: TCP port; 0 (default) picks a free port, kept across :meth:`restart`.
        ssl_context: serve HTTPS with this server-side :class:`ssl.SSLContext` (its
            certificate loaded; set ``verify_mode = ssl.CERT_REQUIRED`` and a CA to require
            client certificates). Default None: plain HTTP.

    Attributes:
        url: ``"http://HOST:PORT"`` (``"https://..."`` with ``ssl_context``; no trailing
            slash), valid once started.
        faults: the :class:`~queen_sync.testing._faults.FaultInjector` of this broker.

    Use as a context manager (``with EmbeddedBroker() as broker:``) or call :meth:`start` /
    :meth:`stop`. State survives :meth:`stop`/:meth:`start`/:meth:`restart` (a real broker keeps
    it in PostgreSQL); :meth:`reset` drops it.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.state = BrokerState()
        self.router = Router(self.state)
        self.faults = FaultInjector()
        self.requests = RequestLog()
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self._stop_event = threading.Event()
        self._lifecycle = threading.Lock()
        self._pid = os.getpid()  # the process whose thread serves (see stop() in a forked child)

    # -- lifecycle
    @property
    def url(self) -> str:
        """Base URL, e.g. ``"http://127.0.0.1:54321"`` (``https://`` with an ``ssl_context``)."""
        return "%s://%s:%d" % ("https" if self.ssl_context is not None else "http", self.host, self.port)

    @property
    def running(self) -> bool:
        """True while the listener accepts connections."""
        return self._server is not None

    def start(self) -> "EmbeddedBroker":
        """Start listening (no-op when already running). Returns self.

        Raises:
            OSError: the port cannot be bound (e.g. taken by another process).
        """
        with self._lifecycle:
            if self._server is not None:
                return self
            self._stop_event.clear()
            self.state.stopping = False
            srv = _Server((self.host, self.port), self)
            self.port = srv.server_address[1]
            self._server = srv
            self._pid = os.getpid()
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                                 name="queen-embedded-broker-%d" % self.port, daemon=True)
            t.start()
            self._thread = t
            logger.info("embedded Queen broker listening on %s", self.url)
            return self

    def stop(self) -> None:
        """Close the listener and every open connection (long polls end); state is kept.

        In a process forked from the one that started the broker (where no serve thread
        exists) this only closes the child's copies of the sockets, at once: the parent's
        broker keeps serving, undisturbed.
        """
        if os.getpid() != self._pid:
            self._forget_forked()
            return
        with self._lifecycle:
            srv = self._server
            if srv is None:
                return
            self._server = None
            self._stop_event.set()
            self.state.stopping = True
            self.state.wake_all()
            srv.shutdown()
            srv.server_close()
            srv.close_all()
            if self._thread is not None:
                self._thread.join(5)
            self._thread = None
            logger.info("embedded Queen broker on port %d stopped", self.port)

    def _forget_forked(self) -> None:
        # A forked child has no serve thread: socketserver.shutdown() would wait for ever, and
        # shutdown(2) of an inherited socket would cut the parent's connections too. Locks may
        # have been held by the parent's other threads at fork time, so none is taken: close
        # the child's file descriptors only.
        srv = self._server
        self._server = None
        self._thread = None
        self._lifecycle = threading.Lock()
        self._pid = os.getpid()
        if srv is None:
            return
        for s in [srv.socket] + list(srv.open_sockets):
            try:
                s.close()
            except OSError:
                pass
        logger.debug("embedded Queen broker on port %d released in forked child %d", self.port, self._pid)

    def restart(self) -> None:
        """:meth:`stop` then :meth:`start` on the same port, keeping all state."""
        self.stop()
        self.start()

    def reset(self) -> None:
        """Drop every queue, message, lease, DLQ row, trace and consumer-group record."""
        with self.state.lock:
            conds = self.state.conds
            fresh = BrokerState()
            for k, v in fresh.__dict__.items():
                if k not in ("lock", "conds"):
                    setattr(self.state, k, v)
            self.state.conds = conds
            for c in conds.values():
                c.notify_all()

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return "EmbeddedBroker(%s, %s)" % (self.url, "running" if self.running else "stopped")

    # -- introspection
    def request_count(self, method: Optional[str] = None, path_prefix: str = "") -> int:
        """Number of requests received (faulted ones included) matching ``method`` (None = any)
        and whose path (without query string) starts with ``path_prefix``."""
        return self.requests.count(method, path_prefix)

    def messages(self, queue: str) -> List[Dict[str, Any]]:
        """Stored messages of ``queue`` in push order (consumed ones included, deleted ones not):
        dicts ``{id, transactionId, partition, partitionId, data, createdAt, traceId}``."""
        return self.state.stored_messages(queue)

    def dlq(self, queue: Optional[str] = None) -> List[Dict[str, Any]]:
        """Dead-letter rows (newest first), shaped like ``GET /api/v1/dlq`` messages."""
        return self.state.dlq_rows(queue, None, 100, 0)[1]["messages"]
