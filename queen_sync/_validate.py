"""Argument checks shared by the client, transport, builders, producer and admin modules.

The ``*_arg`` checks return the value unchanged when it is valid and raise
:class:`~queen_sync.errors.InvalidInputError` (before anything is sent) when it is not.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, Optional

from .errors import InvalidInputError

__all__ = ["int_arg", "bool_arg", "utc_millis", "is_iso_timestamp", "parse_iso_timestamp", "timestamp_arg"]


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
    (``2026-11-30T06:21:21.749Z``; microseconds are truncated); a naive datetime is taken
    as UTC.

    Raises:
        OverflowError: the instant is outside years 1..9999 once moved to UTC.
    """
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    v = value.astimezone(_dt.timezone.utc)
    # explicit widths: strftime("%Y") does not zero-pad years before 1000 on every platform
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (
        v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond // 1000
    )


# ISO-8601 / RFC 3339 extended calendar form, parsed here rather than by
# datetime.fromisoformat, whose grammar differs between Python versions (3.11 added week
# dates, basic forms and "Z"; a 0.15 broker reads an unparsable subscriptionFrom as "all").
_ISO_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[Tt ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:[.,]([0-9]+))?)?"
    r"(?:([Zz])|([+-])([0-9]{2})(?::?([0-9]{2}))?)?)?"
)


def parse_iso_timestamp(text: Any) -> Optional[_dt.datetime]:
    """Parse ``YYYY-MM-DD[(T|t| )HH:MM[:SS[(.|,)fraction]][Z|±HH[:MM]]]`` into an aware UTC
    datetime, or return ``None`` when ``text`` is not of that form or not a valid instant.

    Without an offset the time is taken as UTC; a date alone is midnight UTC. Digits beyond
    microseconds are truncated. Week dates (``2026-W01-1``), ordinal dates and basic forms
    (``20260101T000000Z``) are not accepted, on every Python version.
    """
    if not isinstance(text, str):
        return None
    m = _ISO_RE.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second, frac, _zulu, sign, off_h, off_m = m.groups()
    try:
        tz = _dt.timezone.utc
        if sign is not None:
            offset = _dt.timedelta(hours=int(off_h), minutes=int(off_m or 0))
            if int(off_m or 0) >= 60:
                return None
            tz = _dt.timezone(-offset if sign == "-" else offset)  # ValueError past ±24 h
        value = _dt.datetime(
            int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
            int((frac or "0")[:6].ljust(6, "0")), tzinfo=tz,
        )
        return value.astimezone(_dt.timezone.utc)
    except (ValueError, OverflowError):
        return None


def is_iso_timestamp(text: str) -> bool:
    """True when ``text`` is a timestamp :func:`parse_iso_timestamp` accepts."""
    return parse_iso_timestamp(text) is not None


def timestamp_arg(name: str, value: Any, *, allow_now: bool = False) -> str:
    """Check a timestamp argument and return the text sent to the broker, always
    ``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC (millisecond precision, truncated).

    Args:
        name: the argument name (for the error message).
        value: a ``datetime`` (naive means UTC), an ISO-8601 string as described in
            :func:`parse_iso_timestamp` (without an offset means UTC; ``Z`` and ``±HH:MM``
            accepted on every Python version), or ``"now"`` when ``allow_now`` (sent as is).

    Raises:
        InvalidInputError: anything else, a string of another form, or an instant outside
            years 1..9999 in UTC.
    """
    if allow_now and value == "now" and isinstance(value, str):
        return "now"
    what = "'now', an ISO-8601 timestamp or a datetime" if allow_now else "an ISO-8601 timestamp or a datetime"
    if isinstance(value, _dt.datetime):
        try:
            return utc_millis(value)
        except (OverflowError, ValueError):
            raise InvalidInputError("%s is out of range once moved to UTC: %r" % (name, value)) from None
    if not isinstance(value, str) or not value:
        raise InvalidInputError("%s must be %s, got %r" % (name, what, value))
    parsed = parse_iso_timestamp(value)
    if parsed is None:
        raise InvalidInputError(
            "%s must be %s such as 2026-11-30T06:21:21.749Z (or +01:00 for an offset), got %r" % (name, what, value)
        )
    return utc_millis(parsed)
