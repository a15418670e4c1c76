"""Our cycle computation against the official 0.15.0 runtime's own cycles.

``shared/wire/streams-client-*.q015.jsonl`` record the official queen-mq 0.15.0 Streams SDK
running five pipelines against a real broker. Each test rebuilds the same pipeline with our
``Stream``, feeds our pure processor the very messages and state rows the official runtime
got, and requires the very cycle it sent: state ops (keys, values), sink items (queue,
partition, payload), ack and ``release_lease``. Differences by design: our sink items also
carry a ``transactionId``, and our window rows an ``openedBy`` field (both stripped here).
Skipped when the ``shared/`` folder beside the repository is absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from queen_sync.streams import Stream, token_bucket_gate
from queen_sync.streams.processor import needs_state, process_batch, process_flush
from queen_sync.streams.state import to_iso_ms


def _find_wire() -> Optional[Path]:
    for parent in Path(__file__).resolve().parents:
        cand = parent / "shared" / "wire"
        if (cand / "streams-client-results.json").is_file():
            return cand
    return None


WIRE = _find_wire()
pytestmark = pytest.mark.skipif(WIRE is None, reason="shared/wire captures not available")


class _Q:
    def __init__(self, name: str) -> None:
        self.name = name


def _records(name: str) -> List[Dict[str, Any]]:
    assert WIRE is not None
    with open(WIRE / ("streams-client-%s.q015.jsonl" % name), encoding="utf-8") as f:
        recs = [json.loads(line) for line in f]
    return sorted(recs, key=lambda r: r["seq"])


def _strip(body: Dict[str, Any]) -> Dict[str, Any]:
    def op(o: Dict[str, Any]) -> Dict[str, Any]:
        if o.get("type") == "upsert" and isinstance(o.get("value"), dict):
            o = dict(o, value={k: v for k, v in o["value"].items() if k != "openedBy"})
        return o

    return {
        "state_ops": [op(o) for o in body["state_ops"]],
        "push_items": [{k: v for k, v in it.items() if k != "transactionId"} for it in body["push_items"]],
        "ack": body["ack"],
        "release_lease": body["release_lease"],
    }


def _replay(name: str, stream: Stream, *, clock_of=None) -> int:
    """Check every cycle of the capture; return how many were compared."""
    plan = stream.compile()
    recs = _records(name)
    src = json.load(open(WIRE / "streams-client-results.json"))[name]["source_queue"]
    pops: List[Dict[str, Any]] = []
    last_state: Dict[str, Dict[str, Any]] = {}
    last_state_req: Dict[str, Dict[str, Any]] = {}
    compared = 0
    for r in recs:
        if r["method"] == "GET" and "/pop/queue/%s" % src in r["path"] and r["resp_body"].get("messages"):
            pops.extend(r["resp_body"]["messages"])
        elif r["path"] == "/streams/v1/state/get":
            pid = r["req_body"]["partition_id"]
            last_state[pid] = {row["key"]: row["value"] for row in r["resp_body"]["rows"]}
            last_state_req[pid] = r
        elif r["path"] == "/streams/v1/cycle":
            body = r["req_body"]
            pid = body["partition_id"]
            if body["ack"] is not None:
                lease = body["ack"]["leaseId"]
                batch = [m for m in pops if m["partitionId"] == pid and m["leaseId"] == lease]
                loaded = last_state.get(pid, {}) if needs_state(plan) else {}
                now = clock_of(r, body) if clock_of else r["t_ms"]
                work = process_batch(plan, name, pid, batch[0]["partition"], lease, batch, loaded, now)
            else:
                req = last_state_req[pid]["req_body"]
                clock = req["ripe_at_or_before"] + plan.window.grace_ms if "ripe_at_or_before" in req else last_state_req[pid]["t_ms"]
                part = next(m["partition"] for m in pops if m["partitionId"] == pid)
                work = process_flush(plan, name, pid, part, last_state[pid], clock)
            assert work.commit
            ours = _strip({"state_ops": work.state_ops, "push_items": work.push_items, "ack": work.ack,
                           "release_lease": work.release_lease})
            assert ours == _strip(body), "cycle seq %d differs" % r["seq"]
            compared += 1
    return compared


def test_tumbling_aggregate_with_idle_flush():
    def bounds(agg, ctx):
        return {"customer": ctx["partition"], "windowStart": to_iso_ms(ctx["windowStart"]),
                "windowEnd": to_iso_ms(ctx["windowEnd"]), **agg}

    s = (Stream.from_(_Q("src")).window_tumbling(seconds=2, idle_flush_ms=1000)
         .aggregate({"count": lambda v: 1, "sum": lambda v: v["amount"], "min": lambda v: v["amount"],
                     "max": lambda v: v["amount"]})
         .map(bounds).to(_Q("wire-streams-client-tumbling-1a230cc16cb-out")))
    assert _replay("tumbling", s) == 4  # 2 main cycles (first window closed), 2 idle flushes


def test_token_bucket_gate_partial_acks():
    s = (Stream.from_(_Q("src")).gate(token_bucket_gate(capacity=3, refill_per_sec=2))
         .to(_Q("wire-streams-client-gate-1a230c76be7-out")))

    def gate_clock(_r, body):  # the runtime's wall clock, as it stored it
        return body["state_ops"][0]["value"]["lastRefillAt"]

    assert _replay("gate", s, clock_of=gate_clock) == 3


def test_in_window_dedup_flat_map():
    s = (Stream.from_(_Q("src")).filter(lambda m: m["data"].get("type") != "heartbeat")
         .map(lambda m: m["data"]["eventId"])
         .window_tumbling(seconds=2, idle_flush_ms=800)
         .reduce(lambda acc, v: acc if v in acc else acc + [v], [])
         .flat_map(lambda ids, ctx: [{"eventId": i} for i in ids])
         .to(_Q("wire-streams-client-dedup-1a230d0c719-out")))
    assert _replay("dedup", s) == 2


def test_session_window():
    s = (Stream.from_(_Q("src")).window_session(gap=1.5, idle_flush_ms=500)
         .reduce(lambda a, v: a + v["amount"], 0)
         .map(lambda total, ctx: {"user": ctx["partition"], "total": total, "sessionStart": ctx["windowStart"],
                                  "sessionEnd": ctx["windowEnd"]})
         .to(_Q("wire-streams-client-session-1a230d0e5d2-out")))
    assert _replay("session", s) == 2


def test_stateless_filter_map():
    s = (Stream.from_(_Q("src")).filter(lambda m: m["data"]["type"] != "heartbeat")
         .map(lambda m: {**m["data"], "receivedAt": m["createdAt"], "upperType": m["data"]["type"].upper()})
         .to(_Q("wire-streams-client-stateless-1a230d2272a-out")))
    assert _replay("stateless", s) == 1


def test_config_hashes_equal_the_captured_registrations():
    # same chains as above: the register bodies of the captures carry the official hashes
    for name in ("tumbling", "gate", "dedup", "session", "stateless"):
        reg = next(r for r in _records(name) if r["path"] == "/streams/v1/queries")
        assert reg["resp_body"]["success"] is True
    s = Stream.from_(_Q("src")).gate(token_bucket_gate(capacity=3, refill_per_sec=2)).to(
        _Q("wire-streams-client-gate-1a230c76be7-out"))
    gate_reg = next(r for r in _records("gate") if r["path"] == "/streams/v1/queries")
    assert s.config_hash() == gate_reg["req_body"]["config_hash"]
