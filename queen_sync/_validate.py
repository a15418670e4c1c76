"""Argument checks shared by the client, transport, wire layer and features.

The ``*_arg`` checks and :func:`validate_name` return the value unchanged when it is valid
and raise :class:`~queen_sync.errors.InvalidInputError` (before anything is sent) when it is
not. :func:`resolve_group` and :func:`group_from_context` read the consumer group of an ack.

Names of queues, partitions and consumer groups (and ids placed in a path) must be
non-empty strings of URL-safe characters ``[A-Za-z0-9._~-]`` (not ``"."`` nor ``".."``): a
0.15 broker does not URL-decode paths. They are at most 255 characters: the broker keeps them
in ``VARCHAR(255)`` columns, and a push naming a longer queue or partition fails in its
database, which a 0.15 broker answers ``buffered`` and then retries for ever (as it does for a
non-UUID trace id).
"""

from __future__ import annotations

import datetime as _dt
import re
import warnings
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .codec import QUEUE_MODE
from .errors import InvalidInputError

__all__ = [
    "int_arg",
    "timeout_arg",
    "headers_arg",
    "millis_or_deprecated_seconds",
    "bool_arg",
    "str_arg",
    "items_arg",
    "utc_millis",
    "is_iso_timestamp",
    "parse_iso_timestamp",
    "timestamp_arg",
    "validate_name",
    "validate_label",
    "validate_path_token",
    "redact_url",
    "url_has_userinfo",
    "resolve_group",
    "group_from_context",
    "refuse_unleased",
    "refuse_duplicate_acks",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9._~-]+$")

#: Longest queue / partition / consumer-group name (and path id): the broker's VARCHAR(255).
MAX_NAME_LENGTH = 255


#: Largest duration argument, in milliseconds (one year). Every ``*_millis`` argument checked
#: here is refused above it: a bigger one overflows the timeouts of threads and sockets
#: (``OverflowError`` deep inside a send or a sender thread) instead of meaning "forever".
MAX_DURATION_MILLIS = 365 * 24 * 3600 * 1000


def int_arg(name: str, value: Any, minimum: int, maximum: Optional[int] = None) -> int:
    """Check that ``value`` is an int (not a bool) ``>= minimum`` (and ``<= maximum``; for a
    ``name`` ending in ``_millis``, at most :data:`MAX_DURATION_MILLIS`) and return it.

    Raises:
        InvalidInputError: ``"<name> must be an int >= <minimum>[ and <= <maximum>], got <value!r>"``.
    """
    if maximum is None and name.endswith("_millis"):
        maximum = MAX_DURATION_MILLIS
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        bound = "" if maximum is None else " and <= %d" % maximum
        raise InvalidInputError("%s must be an int >= %d%s, got %r" % (name, minimum, bound, value))
    return value


def timeout_arg(name: str, value: Any) -> Any:
    """Check that ``value`` is None (no bound) or a number of milliseconds ``>= 0`` (an int or
    a finite float, not a bool) and return it.

    Raises:
        InvalidInputError: ``"<name> must be None or a number of milliseconds >= 0, got <value!r>"``.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_DURATION_MILLIS:
        raise InvalidInputError(
            "%s must be None or a number of milliseconds >= 0 and <= %d, got %r" % (name, MAX_DURATION_MILLIS, value)
        )
    return value


def millis_or_deprecated_seconds(
    new_name: str, millis: Any, old_name: str, seconds: Any, default_millis: Optional[int], stacklevel: int = 3
) -> Optional[int]:
    """The value of a ``*_millis`` duration argument that replaced a seconds-valued one.

    ``millis`` (an int >= 0, or None) wins; else ``seconds`` (the old argument, a number
    >= 0, or None) is converted to milliseconds with a :class:`DeprecationWarning` pointing
    at the caller (``stacklevel`` as :func:`warnings.warn`, counted from the caller of this
    function); else ``default_millis``.

    Raises:
        InvalidInputError: both given, or a value of the wrong type or negative.
    """
    if seconds is None:
        return default_millis if millis is None else int_arg(new_name, millis, 0)
    if millis is not None:
        raise InvalidInputError("give %s (milliseconds), not both it and %s (deprecated, seconds)" % (new_name, old_name))
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < float("inf"):
        raise InvalidInputError("%s must be a number of seconds >= 0, got %r (use %s)" % (old_name, seconds, new_name))
    warnings.warn(
        "%s (seconds) is deprecated and will be removed in the next release; use %s (milliseconds)"
        % (old_name, new_name),
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return int(round(seconds * 1000.0))


# RFC 9110 field-name token; a value may hold any visible character, space and tab
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_HEADER_VALUE_BAD_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_FRAMING_HEADERS = frozenset(("content-length", "transfer-encoding"))


def headers_arg(headers: Any) -> Dict[str, str]:
    """Check extra request headers (a mapping of str to str, names RFC 9110 tokens, no CR, LF
    or other control character in a value, no ``Content-Length`` / ``Transfer-Encoding``) and
    return them as a new dict.

    Raises:
        InvalidInputError: a non-mapping, a non-str name or value, a bad name, a value
            with a control character (which would split the request: header injection), or a
            body-framing header (which would desynchronise the pooled connection).
    """
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidInputError("headers must be a dict of str to str, got %r" % (headers,))
    out: Dict[str, str] = {}
    for k, v in headers.items():
        if not isinstance(k, str) or not _HEADER_NAME_RE.match(k):
            raise InvalidInputError("header name %r is not a valid HTTP header name (a str token)" % (k,))
        if k.lower() in _FRAMING_HEADERS:
            # the transport frames every body itself: a wrong length leaves the rest of the body
            # on the pooled connection, read by the broker as the next request
            raise InvalidInputError("header %s: set by the client for each request; it cannot be given" % k)
        if not isinstance(v, str):
            raise InvalidInputError("header %s: the value must be a str, got %s" % (k, type(v).__name__))
        if _HEADER_VALUE_BAD_RE.search(v):
            raise InvalidInputError("header %s: the value must not contain CR, LF or other control characters" % k)
        try:
            v.encode("latin-1")  # what http.client sends
        except UnicodeEncodeError:
            raise InvalidInputError("header %s: the value must be Latin-1 text" % k) from None
        out[k] = v
    return out


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


def str_arg(name: str, value: Any) -> str:
    """Check that ``value`` is a non-empty str and return it.

    Raises:
        InvalidInputError: ``"<name> must be a non-empty str, got <value!r>"``.
    """
    if not isinstance(value, str) or not value:
        raise InvalidInputError("%s must be a non-empty str, got %r" % (name, value))
    return value


def _userinfo_split(url: str) -> Tuple[str, str, str]:
    """``(scheme and //, user info, the rest from its "@")`` of ``url``; the user info is
    ``""`` when there is none. The user info runs to the last ``@`` before the first ``/``
    after ``//``, even past a ``?`` or ``#`` (a password may hold those unencoded), and an
    ``@`` in the path is not one."""
    head, sep, rest = url.partition("//")
    if not sep:
        head, rest = "", url
    else:
        head += sep
    slash = rest.find("/")
    at = rest.rfind("@", 0, len(rest) if slash < 0 else slash)
    if at < 0:
        return head, "", rest
    return head, rest[:at], rest[at:]


def url_has_userinfo(url: str) -> bool:
    """True when ``url`` carries user info (``user[:password]@``; see :func:`redact_url`)."""
    return _userinfo_split(url)[2].startswith("@")


def redact_url(url: str) -> str:
    """``url`` fit for an error message or a log line: its user info and its query / fragment
    masked (``***``), since a URL refused or shown may carry a password or a token there."""
    head, userinfo, rest = _userinfo_split(url)
    if rest.startswith("@"):
        head += "***"
    return head + re.sub(r"([?#]).*", r"\1***", rest, count=1, flags=re.S)


def validate_name(kind: str, value: Any) -> str:
    """Check a queue / partition / consumer-group name; return it.

    Raises:
        InvalidInputError: not a non-empty str of ``[A-Za-z0-9._~-]``, ``"."`` / ``".."``, or
            longer than 255 characters.
    """
    validate_label(kind + " name", value)  # non-empty str within the broker's VARCHAR(255)
    if value in (".", ".."):
        raise InvalidInputError(
            "%s name %r is not valid: '.' and '..' are not valid names, a URL path would collapse them"
            % (kind, value)
        )
    if not _NAME_RE.match(value):
        raise InvalidInputError(
            "%s name %r has characters a Queen 0.15 broker cannot route; use only A-Z a-z 0-9 . _ ~ -"
            % (kind, value)
        )
    return value


def validate_label(kind: str, value: Any) -> str:
    """Check a queue's namespace or task (``kind`` names which); return it.

    A label travels in JSON bodies (``POST /api/v1/configure``) and as decoded query values
    (the admin filters), never in a path, so any character a JSON string holds is accepted
    (unlike :func:`validate_name`); only the broker's ``VARCHAR(255)`` column bounds it.

    Raises:
        InvalidInputError: not a non-empty str, or longer than 255 characters.
    """
    if not isinstance(value, str) or not value:
        raise InvalidInputError("%s must be a non-empty str, got %r" % (kind, value))
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidInputError(
            "%s is %d characters long; a Queen broker stores at most %d (%r...)"
            % (kind, len(value), MAX_NAME_LENGTH, value[:40])
        )
    return value


#: A lease id, partition id or transaction id placed in a path: the same URL-safe rule as names.
validate_path_token = validate_name


def resolve_group(message: Mapping[str, Any], explicit: Optional[str]) -> Optional[str]:
    """The consumer group to ack ``message`` for: ``explicit`` if given, else the message's own
    ``consumerGroup``; ``None`` (queue mode) for ``__QUEUE_MODE__`` or no group."""
    group = explicit if explicit is not None else message.get("consumerGroup")
    if not group or group == QUEUE_MODE:
        return None
    return group


def refuse_unleased(what: str, message: Mapping[str, Any]) -> None:
    """Refuse to ack a message popped with ``auto_ack(True)``: the broker hands it out with
    ``leaseId: ""``. It was counted as acked at the pop; an ack (or nack) of it carries no
    lease, so the broker would apply it unfenced (a nack re-delivers a message already
    committed). A hand-made dict without a ``leaseId``, or with ``None``, is not concerned
    (it asks for an unfenced ack on purpose).

    Raises:
        InvalidInputError: ``what`` (e.g. ``"ack"``, ``"ack item 2"``) names the call.
    """
    if message.get("leaseId") == "":
        raise InvalidInputError(
            "%s: message %s has no lease (popped with auto_ack(True)): the broker acked it at the pop, "
            "and an ack or nack without its lease would be applied unchecked; pop without auto_ack to ack it"
            % (what, message.get("transactionId"))
        )


def ack_context(
    context: Optional[Mapping[str, Any]], group: Optional[str] = None, error: Optional[str] = None
) -> Tuple[Optional[str], Optional[str]]:
    """Read an ack's ``{"group"|"consumer_group"|"consumerGroup": g, "error": text}`` and the
    keyword forms ``group=`` / ``error=`` (the same value in both is fine, two different ones
    are not): ``(group or None, error text or None)``; InvalidInputError for a bad one."""
    ctx_group, extra = group_from_context(context, ("error",))
    if group is not None:
        validate_name("consumer group", group)
        if ctx_group is not None and ctx_group != group:
            raise InvalidInputError("group=%r and the context's group %r differ" % (group, ctx_group))
        ctx_group = group
    ctx_error = extra.get("error")
    if error is not None:
        if not isinstance(error, str):
            raise InvalidInputError("error must be a str, got %r" % (error,))
        if ctx_error is not None and str(ctx_error) != error:
            raise InvalidInputError("error= and the context's error differ")
        ctx_error = error
    return ctx_group, (None if ctx_error is None else str(ctx_error))


def group_from_context(
    context: Optional[Mapping[str, Any]], allowed_extra: Tuple[str, ...] = ()
) -> Tuple[Optional[str], Dict[str, Any]]:
    """Read the consumer group from ``{"group"|"consumer_group"|"consumerGroup": g}``.

    Returns ``(group or None, the other allowed keys)``. Unknown keys raise InvalidInputError.
    """
    if context is None:
        return None, {}
    if not isinstance(context, Mapping):
        raise InvalidInputError("context must be a dict such as {'consumer_group': 'g'}, got %r" % (context,))
    keys = {"group", "consumer_group", "consumerGroup"} | set(allowed_extra)
    unknown = set(context) - keys
    if unknown:
        raise InvalidInputError(
            "unknown context key(s) %s; allowed: %s" % (sorted(map(str, unknown)), sorted(keys))
        )
    groups = {context[k] for k in ("group", "consumer_group", "consumerGroup") if context.get(k) is not None}
    if len(groups) > 1:
        raise InvalidInputError("context names two different consumer groups: %s" % sorted(map(str, groups)))
    group = groups.pop() if groups else None
    if group is not None:
        validate_name("consumer group", group)
    return group, {k: context[k] for k in allowed_extra if k in context}


def items_arg(items: Any, what: str) -> List[Mapping[str, Any]]:
    """One item dict or a list of them (as push / transaction calls take), as a list.

    Raises:
        InvalidInputError: neither a dict nor a list (``what`` names the call).
    """
    kind = type(items)
    if kind is list:  # the common cases first: the ABC checks below cost microseconds
        return items[:]
    if kind is dict:
        return [items]
    if isinstance(items, Mapping):
        return [items]
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise InvalidInputError(
            "%s takes a dict such as {'data': ...} or a list of them, got %s" % (what, type(items).__name__)
        )
    return list(items)


def refuse_duplicate_acks(entries: Iterable[Tuple[int, Mapping[str, Any], Optional[str]]], what: str, remedy: str) -> None:
    """Refuse acks naming one message twice for one consumer group: the broker would apply
    both (a ``completed`` ack counted twice toward the pop's batch releases its lease early;
    two nacks count two retries). ``Queen.ack`` of a list and a transaction's commit call it
    before anything is sent.

    Args:
        entries: ``(position, message, group)`` per ack: its place in the caller's list (or
            the transaction's operations), the message dict or ack operation (its
            ``transactionId``, ``partitionId`` and ``leaseId`` are read; the same message
            is the same pair of ids, whatever the lease) and the effective consumer group
            (None: queue mode).
        what: how the error names the positions, e.g. ``"ack items"``.
        remedy: what the error tells the caller to do, e.g. ``"remove the duplicate"``.

    Raises:
        InvalidInputError: ``"<what> 0 and 3 are the same message (transactionId ...,
            partitionId ...) for consumer group 'g'[ (under two leases: ...)]: <remedy>
            (nothing was sent)"``, for the first repeat.
    """
    seen: Dict[Tuple[Optional[str], Any, Any], Tuple[int, Mapping[str, Any]]] = {}
    for j, n, group in entries:
        ident = (group, n.get("transactionId"), n.get("partitionId"))
        first = seen.get(ident)
        if first is None:
            seen[ident] = (j, n)
            continue
        i, m = first
        leases = ""
        if m.get("leaseId") != n.get("leaseId"):
            leases = " (under two leases: leaseId %s and %s, e.g. a copy redelivered after its lease expired)" % (
                m.get("leaseId"), n.get("leaseId"))
        raise InvalidInputError(
            "%s %d and %d are the same message (transactionId %s, partitionId %s) for %s%s: %s (nothing was sent)"
            % (what, i, j, m.get("transactionId"), m.get("partitionId"),
               "queue mode" if group is None else "consumer group %r" % group, leases, remedy)
        )
