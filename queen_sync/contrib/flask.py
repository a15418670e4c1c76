"""Flask integration: one shared :class:`~queen_sync.Queen` client per process.

Install with ``pip install '.[flask]'`` from a checkout (``pip install 'queen-sync[flask]'``
once published on an index). ::

    from flask import Flask
    from queen_sync.contrib.flask import Queen, queen

    app = Flask(__name__)
    app.config["QUEEN_URL"] = "http://127.0.0.1:6632"
    Queen(app)                                   # or: ext = Queen(); ext.init_app(app)

    @app.post("/orders")
    def create_order():
        queen.queue("orders").push({"data": request.get_json()})   # the shared client
        return "", 202

Configuration keys (``app.config``; all optional): ``QUEEN_URL`` or ``QUEEN_URLS`` (a list or
a comma-separated str; without either the ``QUEEN_URL`` environment variable is read),
``QUEEN_BEARER_TOKEN``, ``QUEEN_TIMEOUT_MILLIS``, ``QUEEN_RETRY_ATTEMPTS``,
``QUEEN_RETRY_DELAY_MILLIS``, ``QUEEN_RETRY_MAX_DELAY_MILLIS``, ``QUEEN_HEADERS``,
``QUEEN_POOL_MAXSIZE``, ``QUEEN_CONNECT_TIMEOUT_MILLIS``, ``QUEEN_LOAD_BALANCING_STRATEGY``,
``QUEEN_AFFINITY_HASH_RING``, ``QUEEN_HEALTH_RETRY_AFTER_MILLIS``,
``QUEEN_CLOSE_TIMEOUT_MILLIS`` (see :class:`queen_sync.Queen`; times in milliseconds).
They are read by ``init_app`` (bad values raise :class:`~queen_sync.InvalidInputError` there);
the client itself is created on first use.

Lifecycle: the client is created lazily, once per process (a worker forked by gunicorn
``--preload`` makes its own; the pid is checked on each access), shared by all threads, and
closed at interpreter exit (``atexit``), which flushes buffered pushes (bounded by
``QUEEN_CLOSE_TIMEOUT_MILLIS``). Call :meth:`FlaskQueen.close` to close it earlier (e.g. in a
gunicorn ``worker_exit`` hook).

Access: ``current_app.extensions["queen"]`` is the :class:`FlaskQueen` extension
(``.client`` is the ``Queen``; the client's public methods are also reachable on the
extension, e.g. ``ext.queue("orders")``), and :data:`queen` is a proxy to the current app's
client, usable wherever an application context is active (inside a request, a CLI command,
``with app.app_context():``).
"""

from __future__ import annotations

import weakref
from typing import Any, Optional

from flask import Flask, current_app, has_app_context
from werkzeug.local import LocalProxy

from ..client import Queen as _Client
from ._shared import ProcessClient, client_options

__all__ = ["FlaskQueen", "Queen", "queen", "get_client", "EXTENSION_KEY"]

#: Key of the extension in ``app.extensions``.
EXTENSION_KEY = "queen"


class FlaskQueen:
    """Flask extension giving each app one shared :class:`queen_sync.Queen` client per process.

    Args:
        app: the Flask app to set up now (else call :meth:`init_app` later; one extension
            object may serve several apps, each with its own settings and client).
        **client_kwargs: default :class:`queen_sync.Queen` keyword arguments; ``QUEEN_*``
            config keys override them.

    Raises:
        InvalidInputError: (from :meth:`init_app`) a config value of the wrong type, or both
            ``QUEEN_URL`` and ``QUEEN_URLS``.
    """

    def __init__(self, app: Optional[Flask] = None, **client_kwargs: Any) -> None:
        self._defaults = dict(client_kwargs)
        self._holders: "weakref.WeakKeyDictionary[Flask, ProcessClient]" = weakref.WeakKeyDictionary()
        self._last_app: Optional["weakref.ReferenceType[Flask]"] = None
        if app is not None:
            self.init_app(app)

    def __repr__(self) -> str:
        return "FlaskQueen(apps=%d)" % len(self._holders)

    def init_app(self, app: Flask) -> None:
        """Register the extension on ``app``: reads its ``QUEEN_*`` config now and stores the
        extension in ``app.extensions["queen"]``. No connection is made here.

        Raises:
            InvalidInputError: a bad config value.
        """
        configured = client_options(app.config, "QUEEN_")
        options = dict(self._defaults)
        if "url" in configured or "urls" in configured:  # the app's URL(s) replace the defaults'
            options.pop("url", None)
            options.pop("urls", None)
        options.update(configured)

        def factory() -> _Client:
            return _Client(**options)

        self._holders[app] = ProcessClient(factory, name="flask app %r" % app.import_name)
        self._last_app = weakref.ref(app)
        app.extensions[EXTENSION_KEY] = self

    def _holder(self, app: Optional[Flask] = None) -> ProcessClient:
        if app is None:
            if has_app_context():
                app = current_app._get_current_object()  # type: ignore[attr-defined]
            elif len(self._holders) == 1 and self._last_app is not None:
                app = self._last_app()
            else:
                raise RuntimeError(
                    "no Flask application context: use 'with app.app_context():' or get_client(app)"
                )
        holder = self._holders.get(app) if app is not None else None
        if holder is None:
            raise RuntimeError("the Queen extension is not registered on %r (call init_app)" % (app,))
        return holder

    def get_client(self, app: Optional[Flask] = None) -> _Client:
        """The shared :class:`queen_sync.Queen` client of ``app`` (default: the current app,
        or the only app this extension was set up on) in this process, created on first use.

        Raises:
            RuntimeError: no app given, no app context and several apps registered, or the
                app was not set up with this extension.
            InvalidInputError: no broker URL configured and ``QUEEN_URL`` not set.
        """
        return self._holder(app).get()

    @property
    def client(self) -> _Client:
        """The current app's shared client (see :meth:`get_client`)."""
        return self.get_client()

    def close(self, app: Optional[Flask] = None, timeout_millis: Optional[int] = None) -> int:
        """Close this process's client of ``app`` (default: current/only app), flushing its
        push buffers for at most ``timeout_millis`` milliseconds (default: the client's close
        timeout). A later use creates a new client.

        Returns:
            the number of buffered messages that could not be delivered (0 = none).
        """
        return self._holder(app).close(timeout_millis)

    def close_all(self, timeout_millis: Optional[int] = None) -> int:
        """Close this process's clients of every app set up with this extension.
        Returns the total of undelivered buffered messages."""
        return sum(h.close(timeout_millis) for h in list(self._holders.values()))

    def __getattr__(self, name: str) -> Any:
        # ext.queue(...), ext.ack(...), ext.flush_all_buffers(), ... go to the client.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.get_client(), name)


#: Alias: ``from queen_sync.contrib.flask import Queen``.
Queen = FlaskQueen


def get_client(app: Optional[Flask] = None) -> _Client:
    """The shared client of ``app`` (default: ``current_app``).

    Raises:
        RuntimeError: no application context and no ``app``, or the extension is not set up.
    """
    if app is None:
        app = current_app._get_current_object()  # type: ignore[attr-defined]
    ext = app.extensions.get(EXTENSION_KEY)
    if ext is None:
        raise RuntimeError("the Queen extension is not set up on %r (FlaskQueen(app) or init_app)" % (app,))
    return ext.get_client(app)


#: Proxy to the current app's shared :class:`queen_sync.Queen` client (needs an app context).
queen: "_Client" = LocalProxy(get_client)  # type: ignore[assignment]
