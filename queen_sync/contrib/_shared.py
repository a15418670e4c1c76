"""Pieces shared by the framework integrations (no framework imported here).

- :func:`client_options` turns framework settings (``URL``, ``URLS``, ``BEARER_TOKEN``,
  ``TIMEOUT_MILLIS``, ...) into :class:`~queen_sync.Queen` keyword arguments.
- :class:`ProcessClient` holds one lazily created :class:`~queen_sync.Queen` per process:
  a forked child (gunicorn ``--preload``, uWSGI, multiprocessing) gets its own client on first
  use, and the client is closed (its push buffers flushed) at interpreter exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ..client import Queen
from ..errors import InvalidInputError

__all__ = ["CLIENT_OPTIONS", "client_options", "ProcessClient"]

log = logging.getLogger("queen_sync.contrib")

#: Setting name (without prefix) -> (``Queen`` keyword argument, kind). Kinds: ``url``,
#: ``urls`` (a list or a comma-separated str), ``int`` (an int or a str of digits), ``str``,
#: ``headers`` (a dict of str to str).
CLIENT_OPTIONS: Dict[str, Tuple[str, str]] = {
    "URL": ("url", "url"),
    "URLS": ("urls", "urls"),
    "BEARER_TOKEN": ("bearer_token", "str"),
    "TIMEOUT_MILLIS": ("timeout_millis", "int"),
    "RETRY_ATTEMPTS": ("retry_attempts", "int"),
    "RETRY_DELAY_MILLIS": ("retry_delay_millis", "int"),
    "RETRY_MAX_DELAY_MILLIS": ("retry_max_delay_millis", "int"),
    "HEADERS": ("headers", "headers"),
    "POOL_MAXSIZE": ("pool_maxsize", "int"),
    "CONNECT_TIMEOUT_MILLIS": ("connect_timeout_millis", "int"),
    "LOAD_BALANCING_STRATEGY": ("load_balancing_strategy", "str"),
    "AFFINITY_HASH_RING": ("affinity_hash_ring", "int"),
    "HEALTH_RETRY_AFTER_MILLIS": ("health_retry_after_millis", "int"),
    "CLOSE_TIMEOUT_MILLIS": ("close_timeout_millis", "int"),
}


def _coerce(name: str, kind: str, value: Any) -> Any:
    if kind == "int":
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInputError("%s must be an int, got %r" % (name, value))
        return value
    if kind == "urls":
        if isinstance(value, str):
            value = [u.strip() for u in value.split(",") if u.strip()]
        if not isinstance(value, (list, tuple)):
            raise InvalidInputError("%s must be a list of broker URLs or a comma-separated str" % name)
        return list(value)
    if kind in ("str", "url"):
        if not isinstance(value, str):
            raise InvalidInputError("%s must be a str" % name)
        return value
    if kind == "headers":
        if not isinstance(value, Mapping):
            raise InvalidInputError("%s must be a dict of str to str" % name)
        return dict(value)
    raise AssertionError(kind)  # pragma: no cover


def client_options(settings: Mapping[str, Any], prefix: str = "", *, strict: bool = False) -> Dict[str, Any]:
    """Read client options from framework settings.

    Args:
        settings: a mapping such as Flask's ``app.config`` (with ``prefix="QUEEN_"``) or
            Django's ``settings.QUEEN`` dict (``prefix=""``). Keys are the names of
            :data:`CLIENT_OPTIONS` after the prefix (``URL``, ``URLS``, ``BEARER_TOKEN``,
            ``TIMEOUT_MILLIS`` (milliseconds), ...). ``None`` values are skipped. Without
            ``URL`` / ``URLS`` the client reads the ``QUEEN_URL`` environment variable.
        prefix: the key prefix.
        strict: raise on keys starting with ``prefix`` that are not client options (for a
            dedicated settings dict, to catch typos).

    Returns:
        keyword arguments for :class:`~queen_sync.Queen`.

    Raises:
        InvalidInputError: a value of the wrong type, both ``URL`` and ``URLS``, or (strict)
            an unknown key. The bearer token is never put in the message.
    """
    out: Dict[str, Any] = {}
    for key, value in settings.items():
        if not isinstance(key, str) or not key.startswith(prefix):
            continue
        opt = CLIENT_OPTIONS.get(key[len(prefix):])
        if opt is None:
            if strict:
                raise InvalidInputError(
                    "unknown Queen setting %r (known: %s)" % (key, ", ".join(prefix + k for k in CLIENT_OPTIONS))
                )
            continue
        if value is None:
            continue
        out[opt[0]] = _coerce(prefix + key[len(prefix):], opt[1], value)
    if "url" in out and "urls" in out:
        raise InvalidInputError("set either %sURL or %sURLS, not both" % (prefix, prefix))
    return out


_HOLDERS: "weakref.WeakSet[ProcessClient]" = weakref.WeakSet()


def _reset_holders_after_fork() -> None:
    for h in list(_HOLDERS):
        h._lock = threading.Lock()  # a lock held by another thread at fork time stays locked


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_holders_after_fork)


class ProcessClient:
    """One shared :class:`~queen_sync.Queen` client per process, created on first use.

    Args:
        factory: called with no arguments to build the client (e.g. reading settings then).
        name: a label for logs (e.g. the Flask app name).

    Thread-safe. :meth:`get` checks ``os.getpid()``: in a forked child the parent's client
    is left alone (its connections and push buffers belong to the parent) and a new client
    is made. A client that was closed is replaced on the next :meth:`get`. At interpreter
    exit (``atexit``) this process's client is closed, which flushes its push buffers
    (bounded by the client's ``close_timeout_millis``).
    """

    def __init__(self, factory: Callable[[], Queen], name: str = "queen") -> None:
        self._factory = factory
        self._name = name
        self._lock = threading.Lock()
        self._client: Optional[Queen] = None
        self._pid: Optional[int] = None
        self._atexit = False
        _HOLDERS.add(self)

    def __repr__(self) -> str:
        live = self._client is not None and self._pid == os.getpid() and not self._client.closed
        return "ProcessClient(%r, %s)" % (self._name, "client open" if live else "no client")

    def peek(self) -> Optional[Queen]:
        """This process's open client, or None when none was created yet (no side effect)."""
        c = self._client
        if c is not None and self._pid == os.getpid() and not c.closed:
            return c
        return None

    def get(self) -> Queen:
        """This process's client, created on first use.

        Raises:
            InvalidInputError: the settings are invalid (or no URL and no ``QUEEN_URL``).
        """
        c = self.peek()
        if c is not None:
            return c
        with self._lock:
            c = self.peek()
            if c is not None:
                return c
            pid = os.getpid()
            if self._client is not None and self._pid != pid:
                log.debug("%s: new Queen client in forked process %d", self._name, pid)
            c = self._factory()
            self._client, self._pid = c, pid
            if not self._atexit:
                atexit.register(self._close_at_exit)
                self._atexit = True
            return c

    def close(self, timeout_millis: Optional[int] = None) -> int:
        """Close this process's client (flushing its push buffers for at most
        ``timeout_millis`` milliseconds; default: the client's close timeout). The next
        :meth:`get` makes a new client.

        Returns:
            the number of buffered messages that could not be delivered (0 = none).
        """
        with self._lock:
            c = self._client if self._pid == os.getpid() else None
            self._client, self._pid = None, None
        if c is None or c.closed:
            return 0
        return c.close(timeout_millis)

    def _close_at_exit(self) -> None:
        try:
            unsent = self.close()
        except Exception:  # pragma: no cover - never break interpreter shutdown
            log.exception("%s: error while closing the Queen client at exit", self._name)
            return
        if unsent:
            log.error("%s: %d buffered message(s) not delivered at exit", self._name, unsent)
