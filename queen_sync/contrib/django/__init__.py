"""Django integration: a shared :class:`~queen_sync.Queen` client and a ``queen_consume``
management command.

Install with ``pip install '.[django]'`` from a checkout (``pip install 'queen-sync[django]'``
once published on an index) and add the app::

    INSTALLED_APPS = [..., "queen_sync.contrib.django"]
    QUEEN = {
        "URL": "http://127.0.0.1:6632",        # or "URLS": [...]; neither: env QUEEN_URL
        "BEARER_TOKEN": None,
        "TIMEOUT_MILLIS": 30000,
    }

Keys of the ``QUEEN`` dict (all optional): ``URL``, ``URLS`` (a list or a comma-separated
str), ``BEARER_TOKEN``, ``TIMEOUT_MILLIS``, ``RETRY_ATTEMPTS``, ``RETRY_DELAY_MILLIS``,
``RETRY_MAX_DELAY_MILLIS``, ``HEADERS``, ``POOL_MAXSIZE``, ``CONNECT_TIMEOUT_MILLIS``,
``LOAD_BALANCING_STRATEGY``, ``AFFINITY_HASH_RING``, ``HEALTH_RETRY_AFTER_MILLIS``,
``CLOSE_TIMEOUT_MILLIS`` (see :class:`queen_sync.Queen`; times in milliseconds). An unknown
key or a value of the wrong type raises :class:`QueenConfigurationError` (an
``ImproperlyConfigured``) when the app loads.

In views and tasks::

    from queen_sync.contrib.django import get_client
    get_client().queue("orders").push({"data": {...}})

:func:`get_client` creates the client on first use, once per process (a worker forked by
gunicorn ``--preload`` or uWSGI makes its own: the pid is checked on each call), shares it
across threads, and closes it at interpreter exit (``atexit``), flushing buffered pushes.
Changing ``settings.QUEEN`` (``override_settings`` in tests) closes the client; the next
call makes one with the new settings.

Consuming: ``python manage.py queen_consume myapp.handlers.handle --queue orders ...``
(see :mod:`queen_sync.contrib.django.management.commands.queen_consume`).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ...client import Queen
from ...errors import InvalidInputError
from .._shared import ProcessClient, client_options

__all__ = ["get_client", "close_client", "queen_settings", "QueenConfigurationError", "SETTING_NAME"]

#: Name of the Django setting holding the client options.
SETTING_NAME = "QUEEN"


class QueenConfigurationError(InvalidInputError, ImproperlyConfigured):
    """``settings.QUEEN`` is not a dict, has an unknown key, or a value of the wrong type."""


def queen_settings() -> Dict[str, Any]:
    """Validate ``settings.QUEEN`` and return the :class:`queen_sync.Queen` keyword arguments
    it describes (``{}`` when the setting is absent: the client then reads ``QUEEN_URL``).

    Raises:
        QueenConfigurationError: not a dict, an unknown key, or a bad value.
    """
    conf = getattr(settings, SETTING_NAME, None)
    if conf is None:
        return {}
    if not isinstance(conf, Mapping):
        raise QueenConfigurationError("settings.%s must be a dict, got %s" % (SETTING_NAME, type(conf).__name__))
    try:
        return client_options(conf, "", strict=True)
    except QueenConfigurationError:
        raise
    except InvalidInputError as exc:
        raise QueenConfigurationError("settings.%s: %s" % (SETTING_NAME, exc)) from None


def _make_client() -> Queen:
    return Queen(**queen_settings())


_holder = ProcessClient(_make_client, name="django")


def get_client() -> Queen:
    """This process's shared :class:`queen_sync.Queen` client, made from ``settings.QUEEN``
    on first use. Thread-safe; fork-aware (pid checked).

    Raises:
        QueenConfigurationError: bad ``settings.QUEEN``.
        InvalidInputError: no ``URL``/``URLS`` and no ``QUEEN_URL`` environment variable.
    """
    return _holder.get()


def close_client(timeout_millis: Optional[int] = None) -> int:
    """Close this process's shared client (flushing buffered pushes for at most
    ``timeout_millis`` milliseconds; default: the client's close timeout). The next
    :func:`get_client` makes a new one.

    Returns:
        the number of buffered messages that could not be delivered (0 = none).
    """
    return _holder.close(timeout_millis)
