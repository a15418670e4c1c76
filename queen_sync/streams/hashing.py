"""The config hash of an operator chain, computed as the official Queen clients compute it.

``sha256(json.dumps([{"kind": op.kind, **op.config}, ...], separators=(",", ":"),
ensure_ascii=False))`` as hex: the operator kinds in order and their structural options
(window sizes as given, aggregate field names, sink queue name, ...), never the callables.
The broker refuses to re-register a query under another hash unless ``reset`` is asked for.
The stdlib ``json`` is used on purpose: the digest must match the official Python client's
byte for byte (its float and unicode formatting), and this is no wire body.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, Iterable, List

__all__ = ["describe", "config_hash"]


def describe(operators: Iterable[Any]) -> List[Dict[str, Any]]:
    """The hashed description of a chain: one ``{"kind": ..., **config}`` per operator (a
    ``kind`` inside ``config``, as windows and sinks have, replaces the outer one in place)."""
    out = []
    for op in operators:
        cfg = getattr(op, "config", None)
        d: Dict[str, Any] = {"kind": op.kind}
        if isinstance(cfg, dict):
            d.update(cfg)
        out.append(d)
    return out


def config_hash(operators: Iterable[Any]) -> str:
    """SHA-256 hex digest of :func:`describe` (compact JSON, UTF-8, non-ASCII kept)."""
    payload = json.dumps(describe(operators), separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
