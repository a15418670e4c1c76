"""Argument checks shared by the client, transport, builders, producer and admin modules.

The ``*_arg`` checks return the value unchanged when it is valid and raise
:class:`~queen_sync.errors.InvalidInputError` (before anything is sent) when it is not.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from .errors import InvalidInputError

__all__ = ["int_arg", "bool_arg", "utc_millis", "is_iso_timestamp"]


def int_arg(name: str, value: Any, minimum: int) -> int:
    """Check that ``value`` is an int (not a bool) ``>= minimum`` and return it.

    Raises:
        InvalidInputError: ``"<name> must be an int >= <minimum>, got <value!r>"``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError("%s must be an int >= %d, got %r" % (name, minimum, value))
    return value


def bool_arg(name: str, value: Any) -> bool:
    """Check that ``value`` is ``True`` or ``False`` and return it.

    Raises:
        InvalidInputError: ``"<name> must be True or False, got <value!r>"``.
    """
    if not isinstance(value, bool):
        raise InvalidInputError("%s must be True or False, got %r" % (name, value))
    return value


def utc_millis(value: _dt.datetime) -> str:
    """Format a datetime as ISO-8601 UTC with millisecond precision and ``Z``
    (``2026-11-30T06:21:21.749Z``); a naive datetime is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    value = value.astimezone(_dt.timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (value.microsecond // 1000)


def is_iso_timestamp(text: str) -> bool:
    """True when ``text`` parses as an ISO-8601 timestamp (a trailing ``Z`` is accepted)."""
    try:
        _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True
