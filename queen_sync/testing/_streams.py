"""The Streams routes of the embedded broker: ``POST /streams/v1/queries`` (register),
``/streams/v1/cycle`` and ``/streams/v1/state/get``, with a Queen 0.15 broker's semantics.

The registered queries and the state rows, keyed by (query id, source partition id), are
records of the broker store (:class:`~queen_sync.testing._records.StreamsStore`); this module
gives them their semantics. A cycle is all-or-nothing under the broker lock: state upserts/deletes, then sink pushes, then
the source ack (lease-checked when it carries a ``leaseId``); any failure undoes all of it and
answers 200 ``success:false``. The real broker runs these as PL/pgSQL procedures, and its
replies carry PostgreSQL's texts and casts (``->>`` text, ``::boolean``, ``::int``,
``::bigint``, ``::uuid``), which are imitated here; see the wire notes' "Streams captures".
"""

from __future__ import annotations

import re
import uuid
from decimal import Decimal
from typing import Any, Dict, List, Optional, Tuple

from ._records import INVALID_LEASE, NOT_FOUND, QUEUE_MODE, Journal, Query, Reply, Row, StreamsStore
from ._state import BrokerState
from ._util import BadRequest, fmt_us, now_us, uuid4

ROUTES = ("/streams/v1/queries", "/streams/v1/cycle", "/streams/v1/state/get")

_CTX_REGISTER = "PL/pgSQL function queen.streams_register_query_v1(jsonb) line 28 at assignment"
_CTX_CYCLE = "PL/pgSQL function queen.streams_cycle_v1(jsonb) line 56 at assignment"
_CTX_STATE = "PL/pgSQL function queen.streams_state_get_v1(jsonb) line 11 at FOR over SELECT rows"
# A stored windowEnd that is no bigint fails the ripe query inside the row scan (line 37).
_CTX_STATE_SCAN = (
    "SQL statement \"SELECT COALESCE(jsonb_agg(\n            jsonb_build_object(\n"
    "                'key',        s.key,\n                'value',      s.value,\n"
    "                'updated_at', s.updated_at\n            ) ORDER BY s.key\n"
    "        ), '[]'::jsonb)\n                            FROM queen_streams.state s\n"
    "        WHERE s.query_id     = v_req.query_id\n          AND s.partition_id = v_req.partition_id\n"
    "          AND (\n              jsonb_array_length(v_req.keys) = 0\n              OR EXISTS (\n"
    "                  SELECT 1 FROM jsonb_array_elements_text(v_req.keys) AS k(key)\n"
    "                  WHERE k.key = s.key\n              )\n          )\n          AND (\n"
    "              v_req.key_prefix IS NULL\n              OR s.key LIKE v_req.key_prefix || '%'\n"
    "          )\n          AND (\n              v_req.ripe_at_or_before IS NULL\n              OR (\n"
    "                  jsonb_typeof(s.value->'windowEnd') = 'number'\n"
    "                  AND (s.value->>'windowEnd')::BIGINT <= v_req.ripe_at_or_before\n"
    "              )\n          )\"\n"
    "PL/pgSQL function queen.streams_state_get_v1(jsonb) line 37 at SQL statement")
_CONFLICT = ("config_hash mismatch: operator chain changed for queryId '%s'. Pass reset:true to wipe "
             "existing state, or use a new queryId.")
_KEY_NOT_NULL = 'null value in column "key" of relation "state" violates not-null constraint'
_QUEUE_NOT_NULL = 'null value in column "name" of relation "queues" violates not-null constraint'
_STATE_FK = 'insert or update on table "state" violates foreign key constraint "state_query_id_fkey"'
_INT32 = (-2 ** 31, 2 ** 31 - 1)
_INT64 = (-2 ** 63, 2 ** 63 - 1)


class _PgError(Exception):
    """A PostgreSQL error inside a procedure; ``text`` is its message (SQLERRM)."""

    def __init__(self, text: str) -> None:
        Exception.__init__(self, text)
        self.text = text


def _store(st: BrokerState) -> StreamsStore:
    if st.streams is None:
        st.streams = StreamsStore()
    return st.streams


def route(st: BrokerState, path: str, body: Any) -> Reply:
    """Answer one of :data:`ROUTES` for a parsed JSON ``body``; raises ``BadRequest`` (400)."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if path == "/streams/v1/queries":
        return register(st, body)
    for key in ("query_id", "partition_id"):
        if not isinstance(body.get(key), str):
            raise BadRequest(key + " is required")
    if path == "/streams/v1/cycle":
        return cycle(st, body)
    return state_get(st, body)


# ---------------------------------------------------------------------- PostgreSQL casts
def _proc_failure(text: str, context: str) -> Reply:
    """The reply when a procedure fails as a whole (its HTTP 500 is lost: 200 on the wire)."""
    return 200, {"success": False, "error": "ERROR:  %s\nCONTEXT:  %s\n" % (text, context)}


def _jsonb_text(v: Any) -> str:
    """How PostgreSQL prints a jsonb container (keys by length then bytes, ``", "``/``": "``)."""
    if isinstance(v, dict):
        items = sorted(v.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
        return "{%s}" % ", ".join('"%s": %s' % (k, _jsonb_text(x)) for k, x in items)
    if isinstance(v, list):
        return "[%s]" % ", ".join(_jsonb_text(x) for x in v)
    if isinstance(v, str):
        return '"%s"' % v
    t = _text(v)
    return "null" if t is None else t


def _text(v: Any) -> Optional[str]:
    """``jsonb ->> key``: strings raw, numbers as numeric text, null as SQL NULL."""
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        # the broker re-serialises the body (2000.0 stays "2000.0"), PostgreSQL keeps the scale
        return format(Decimal(repr(v)), "f")
    return _jsonb_text(v)


def _bool(text: Optional[str], default: bool) -> bool:
    """``text::boolean``: any case, trimmed, unique prefixes of true/false/yes/no, ``on``/``of[f]``,
    ``1``/``0``; NULL gives ``default``."""
    if text is None:
        return default
    s = text.strip().lower()
    if s:
        if "true".startswith(s) or "yes".startswith(s) or s in ("on", "1"):
            return True
        if "false".startswith(s) or "no".startswith(s) or s in ("of", "off", "0"):
            return False
    raise _PgError('invalid input syntax for type boolean: "%s"' % text)


def _integer(text: str, kind: str, bounds: Tuple[int, int]) -> int:
    """``text::int`` / ``text::bigint``."""
    s = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise _PgError('invalid input syntax for type %s: "%s"' % (kind, text))
    n = int(s)
    if not bounds[0] <= n <= bounds[1]:
        raise _PgError('value "%s" is out of range for type %s' % (text, kind))
    return n


def _uuid(text: str) -> str:
    """``text::uuid`` (optional braces, a hyphen allowed after any 4 hex digits, no blanks),
    canonical lower-case form."""
    s = text
    if re.fullmatch(r"\{?[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7}\}?", s) and (s[0] == "{") == (s[-1] == "}"):
        return str(uuid.UUID(s.strip("{}").replace("-", "")))
    raise _PgError('invalid input syntax for type uuid: "%s"' % text)


def _like_prefix(prefix: str) -> "re.Pattern[str]":
    """``key LIKE prefix || '%'`` (``_`` and ``%`` are wildcards, backslash escapes)."""
    out, i = [], 0
    pattern = prefix + "%"
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "_":
            out.append(".")
        elif c == "%":
            out.append(".*")
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _pg_timestamp(us: int) -> str:
    """A timestamptz as PostgreSQL's JSON prints it: ``+00:00``, trailing zeros trimmed."""
    s = fmt_us(us)[:-1]  # YYYY-MM-DDTHH:MM:SS.ffffff
    s = s.rstrip("0").rstrip(".")
    return s + "+00:00"


# ---------------------------------------------------------------------- register
def register(st: BrokerState, body: Dict[str, Any]) -> Reply:
    """``POST /streams/v1/queries`` ``{name, source_queue, config_hash, sink_queue?, reset?}``."""
    for key in ("name", "source_queue", "config_hash"):
        v = body.get(key)
        if not isinstance(v, str) or not v:
            raise BadRequest(key + " is required")
    try:
        reset = _bool(_text(body.get("reset")), False)
    except _PgError as exc:
        return _proc_failure(exc.text, _CTX_REGISTER)
    name, source, chash = body["name"], body["source_queue"], body["config_hash"]
    sink = _text(body.get("sink_queue")) or None
    with st.lock:
        store = _store(st)
        q = store.by_name.get(name)
        fresh = did_reset = False
        if q is None:
            q = Query(name, source, sink, chash)
            store.by_name[name] = q
            store.by_id[q.id] = q
            fresh = True
        elif q.config_hash != chash:
            if not reset:
                return 200, {"success": False, "query_id": q.id, "name": name, "error": _CONFLICT % name}
            for shard_key in [k for k in store.shards if k[0] == q.id]:
                del store.shards[shard_key]
            q.config_hash = chash
            did_reset = True
        q.source_queue, q.sink_queue = source, sink
        return 200, {"success": True, "query_id": q.id, "name": name, "config_hash": chash,
                     "fresh": fresh, "reset": did_reset}


# ---------------------------------------------------------------------- state/get
def state_get(st: BrokerState, body: Dict[str, Any]) -> Reply:
    """``POST /streams/v1/state/get`` ``{query_id, partition_id, keys?, key_prefix?,
    ripe_at_or_before?}``: rows sorted by key (byte order), filters ANDed."""
    keys = body.get("keys")
    keys = keys if isinstance(keys, list) else []
    ripe_raw = body.get("ripe_at_or_before")
    try:
        qid = _uuid(body["query_id"])
        pid = _uuid(body["partition_id"])
        prefix = _text(body.get("key_prefix")) or None
        ripe = None
        if isinstance(ripe_raw, (int, float)) and not isinstance(ripe_raw, bool):
            ripe = _integer(_text(ripe_raw) or "", "bigint", _INT64)
    except _PgError as exc:
        return _proc_failure(exc.text, _CTX_STATE)
    like = _like_prefix(prefix) if prefix is not None else None
    wanted = {t for t in (_text(k) for k in keys) if t is not None}
    with st.lock:
        shard = _store(st).shards.get((qid, pid), {})
        rows = []
        for key in sorted(shard):
            value, updated = shard[key]
            if like is not None and not like.fullmatch(key):
                continue
            if ripe is not None:
                end = value.get("windowEnd") if isinstance(value, dict) else None
                if not isinstance(end, (int, float)) or isinstance(end, bool):
                    continue
                try:  # evaluated before the keys filter, as the real query plan does
                    end_n = _integer(_text(end) or "", "bigint", _INT64)
                except _PgError as exc:
                    return _proc_failure(exc.text, _CTX_STATE_SCAN)
                if end_n > ripe:
                    continue
            rows.append((key, value, updated))
        out = [{"key": k, "value": v, "updated_at": _pg_timestamp(u)}
               for k, v, u in rows if not keys or k in wanted]
    return 200, {"success": True, "rows": out}


# ---------------------------------------------------------------------- cycle
def cycle(st: BrokerState, body: Dict[str, Any]) -> Reply:
    """``POST /streams/v1/cycle``: one all-or-nothing commit of state ops, sink pushes and the
    source ack; a failure inside it answers 200 ``success:false`` and changes nothing."""
    try:
        release = _bool(_text(body.get("release_lease")), True)
    except _PgError as exc:
        return _proc_failure(exc.text, _CTX_CYCLE)
    res: Dict[str, Any] = {"success": True, "query_id": "", "partition_id": "", "queueName": None,
                           "state_ops_applied": 0, "push_results": [], "ack_result": None}
    with st.lock:
        journal = Journal()
        undo: List[Tuple[Dict[str, Tuple[Any, int]], str, Optional[Tuple[Any, int]]]] = []
        touched: set = set()
        st._journal = journal
        try:
            _cycle_locked(st, body, release, res, journal, undo, touched)
        except _PgError as exc:
            for shard, key, old in reversed(undo):
                if old is None:
                    shard.pop(key, None)
                else:
                    shard[key] = old
            st._rollback(journal)
            res["success"] = False
            res["error"] = exc.text
            res["ack_result"] = None
            touched = set()
        finally:
            st._journal = None
        for qn in touched:
            st._notify(qn)
    return 200, res


def _array(v: Any) -> List[Any]:
    if isinstance(v, list):
        return v
    raise _PgError("cannot get array length of a %s" % ("non-array" if isinstance(v, dict) else "scalar"))


def _cycle_locked(st: BrokerState, body: Dict[str, Any], release: bool, res: Dict[str, Any],
                  journal: Journal, undo: list, touched: set) -> None:
    qid = _uuid(body["query_id"])
    res["query_id"] = qid
    pid = _uuid(body["partition_id"])
    res["partition_id"] = pid
    group = _text(body.get("consumer_group")) or QUEUE_MODE
    part = st.partitions_by_id.get(pid)
    res["queueName"] = part.queue.name if part is not None else None
    now = now_us()
    store = _store(st)
    # 1. state ops
    ops = _array(body.get("state_ops", []))
    shard = store.shards.setdefault((qid, pid), {})  # kept even if emptied: undo refers to it
    for op in ops:
        typ = _text(op.get("type")) if isinstance(op, dict) else None
        if typ not in ("upsert", "delete"):
            raise _PgError("Unknown state_op type: %s" % ("null" if typ is None else typ))
        key = _text(op.get("key"))
        if typ == "upsert":
            if key is None:
                raise _PgError(_KEY_NOT_NULL)
            if qid not in store.by_id:
                raise _PgError(_STATE_FK)
            undo.append((shard, key, shard.get(key)))
            shard[key] = (op["value"] if "value" in op else {}, now)
        elif key is not None and key in shard:
            undo.append((shard, key, shard.pop(key)))
        res["state_ops_applied"] += 1
    # 2. sink pushes (the push route's dedup table; a missing payload is stored as {})
    items = _array(body.get("push_items", []))
    if items:
        res["push_results"] = _sink_push(st, items, now, journal, touched)
    # 3. source ack
    ack = body.get("ack")
    if ack is not None:
        res["ack_result"] = _ack(st, ack if isinstance(ack, dict) else {}, pid, group, release, now, journal)
        if part is not None:
            touched.add(part.queue.name)


def _sink_push(st: BrokerState, items: List[Any], now: int, journal: Journal, touched: set) -> List[dict]:
    parsed = []
    for it in items:
        it = it if isinstance(it, dict) else {}
        if _text(it.get("queue")) is None:
            raise _PgError(_QUEUE_NOT_NULL)
        parsed.append(it)
    out = []
    for idx, it in enumerate(parsed):
        trace = _text(it.get("traceId")) or None
        r = st.insert_message(idx, _text(it["queue"]) or "", _text(it.get("partition")) or "Default",
                              _text(it.get("transactionId")) or uuid4(), it["payload"] if "payload" in it else {},
                              _uuid(trace) if trace is not None else None, now, journal, touched)
        out.append(r)
    return out


def _ack(st: BrokerState, ack: Dict[str, Any], pid: str, group: str, release: bool, now: int,
         journal: Journal) -> Dict[str, Any]:
    txid = _text(ack.get("transactionId"))
    lease_id = _text(ack.get("leaseId"))
    status = _text(ack.get("status"))
    status = "completed" if status is None else status
    if not txid:
        raise _PgError("ack.transactionId is required")
    part = st.partitions_by_id.get(pid)
    msg = part.by_tx.get(txid) if part is not None else None
    if part is None or msg is None or msg.deleted:
        raise _PgError(NOT_FOUND)
    row = part.rows.get(group)
    if lease_id and (row is None or row.lease_id != lease_id or not st._lease_live(row, now)):
        raise _PgError(INVALID_LEASE)
    if status in ("completed", "success"):
        count_text = _text(ack.get("count"))
        count = 1 if count_text is None else _integer(count_text, "integer", _INT32)
        journal.save_row(part, group)
        if row is None:
            row = Row(group, 0, now)
            part.rows[group] = row
        row.total_consumed += count
        st._advance(row, msg, now)  # the cursor is set to this message, also backwards
        if release:
            st._release(row)
        return {"success": True, "count": count, "lease_released": release, "dlq": False}
    if status in ("failed", "dlq"):
        if journal.dlq_len is None:
            journal.dlq_len = len(st.dlq)
        err = _text(ack.get("error"))
        st._to_dlq(msg, group, "Streaming cycle reported failure" if err is None else err, 0, now)
        if row is not None:
            journal.save_row(part, group)
            st._advance(row, msg, now)
            st._release(row)
        return {"success": True, "count": 0, "lease_released": False, "dlq": True}
    raise _PgError("Unknown ack.status: %s" % status)
