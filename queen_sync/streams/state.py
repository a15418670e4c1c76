"""State-row formats shared with the official Queen streams runtime, and sink-item ids.

Owns: the state keys (``<operator tag>\\x1f<window start, ISO ms>\\x1f<key>`` for windows,
``sess:<gap>\\x1fopen\\x1f<key>`` for sessions, the partition key for a gate, ``__wm__`` for
the event-time watermark), the ISO-8601 millisecond form of window starts
(``2026-12-01T08:50:12.000Z``, what JavaScript's ``toISOString`` prints), the parsing of
broker timestamps into epoch ms, and the deterministic ``transactionId`` of sink items.
"""

from __future__ import annotations

import hashlib
import re
from datetime import date, datetime, timezone
from functools import lru_cache
from typing import Any, Dict, Optional

__all__ = [
    "SEP",
    "WATERMARK_KEY",
    "to_iso_ms",
    "parse_iso_ms",
    "window_state_key",
    "parse_window_state_key",
    "session_state_key",
    "sink_transaction_id",
]

#: separator of the parts of a state key (U+001F, "unit separator")
SEP = "\u001f"
#: the state key of a partition's event-time watermark, value ``{"eventTimeMs": int}``
WATERMARK_KEY = "__wm__"

_ISO = re.compile(
    r"^\s*(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?\s*"
    r"(Z|z|[+-]\d{2}(?::?\d{2})?)?\s*$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@lru_cache(maxsize=4096)  # many records share a window start
def to_iso_ms(ms: int) -> str:
    """Epoch ms -> ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (always three fraction digits, UTC)."""
    dt = datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


@lru_cache(maxsize=256)
def _day_ms(day: str) -> int:
    return (date(int(day[0:4]), int(day[5:7]), int(day[8:10])).toordinal() - _EPOCH_ORDINAL) * 86400000


def parse_iso_ms(text: Any) -> Optional[int]:
    """An ISO-8601 timestamp (``2026-12-01T08:50:11.551104Z``; no offset means UTC) -> epoch
    ms, truncated, computed exactly (no float rounding); None when it is not one."""
    if not isinstance(text, str):
        return None
    # fast path: the broker's own form, YYYY-MM-DDTHH:MM:SS.f...Z
    if len(text) >= 21 and text[-1] == "Z" and text[10] == "T" and text[19] == "." and text[4] == "-":
        try:
            frac = text[20:-1]
            if frac.isdigit() and text[11:13].isdigit() and text[14:16].isdigit() and text[17:19].isdigit():
                return (_day_ms(text[:10]) + int(text[11:13]) * 3600000 + int(text[14:16]) * 60000
                        + int(text[17:19]) * 1000 + int(frac[:3].ljust(3, "0")))
        except ValueError:
            pass
    m = _ISO.match(text)
    if m is None:
        return None
    y, mo, d, h, mi, s, frac, tz = m.groups()
    try:
        dt = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s or 0), tzinfo=timezone.utc)
    except ValueError:
        return None
    delta = dt - _EPOCH
    ms = (delta.days * 86400 + delta.seconds) * 1000 + (int((frac or "0")[:3].ljust(3, "0")))
    if tz and tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        offset = int(digits[:2]) * 60 + (int(digits[2:4]) if len(digits) >= 4 else 0)
        ms -= sign * offset * 60000
    return ms


def window_state_key(operator_tag: str, window_key: str, user_key: Optional[str]) -> str:
    """The state key of one window (``tag SEP windowKey SEP key``; without a key, two parts)."""
    if user_key is None:
        return operator_tag + SEP + window_key
    return operator_tag + SEP + window_key + SEP + user_key


def parse_window_state_key(state_key: Any) -> Optional[Dict[str, str]]:
    """``{"operatorTag", "windowKey", "userKey"}`` of a window state key, or None. A two-part
    key is the legacy form (no tag)."""
    if not isinstance(state_key, str):
        return None
    parts = state_key.split(SEP)
    if len(parts) == 3:
        return {"operatorTag": parts[0], "windowKey": parts[1], "userKey": parts[2]}
    if len(parts) == 2:
        return {"operatorTag": "", "windowKey": parts[0], "userKey": parts[1]}
    return None


def session_state_key(operator_tag: str, user_key: Any) -> str:
    """The state key of a key's open session: ``sess:<gap> SEP open SEP <key>``."""
    return "%s%sopen%s%s" % (operator_tag, SEP, SEP, user_key)


def sink_transaction_id(query: str, basis: str, index: int) -> str:
    """The ``transactionId`` of a sink item: a UUID-shaped SHA-256 digest of the query name,
    the identity of what produced it (``basis``: the source message, or the window instance)
    and its emit index. The same result always gets the same id, so the broker answers a
    push that lands twice with ``duplicate`` (dedup is per sink partition and id)."""
    h = hashlib.sha256(("%s\x1e%s\x1e%d" % (query, basis, index)).encode("utf-8")).hexdigest()
    # the first 16 bytes as a version-5 / RFC 4122 variant UUID (str(uuid.UUID(bytes=..., version=5)))
    return "%s-%s-5%s-%s%s-%s" % (h[0:8], h[8:12], h[13:16], "89ab"[int(h[16], 16) & 3], h[17:20], h[20:32])
