"""The config hash of a chain equals the official queen-mq 0.15.0 client's (so a query
registered by one can be taken over by the other), for many different chains."""

from __future__ import annotations

import pytest

from queen_sync.streams import Stream, sliding_window_gate, token_bucket_gate
from queen_sync.streams.hashing import describe

official = pytest.importorskip("queen.streams", reason="queen-mq==0.15.0 (test extra) is not installed")


class _Q:
    """A queue builder stand-in both SDKs can read the name of."""

    def __init__(self, name: str) -> None:
        self.name = name


def _f(*_a):
    return 1


CHAINS = {
    "stateless map+sink": lambda S: S.from_(_Q("src")).map(_f).to(_Q("out")),
    "filter+map+foreach": lambda S: S.from_(_Q("src")).filter(_f).map(_f).foreach(_f),
    "tumbling int aggregate": lambda S: S.from_(_Q("src")).window_tumbling(seconds=2, idle_flush_ms=1000)
    .aggregate({"count": _f, "sum": _f, "min": _f, "max": _f}).map(_f).to(_Q("out")),
    "tumbling float grace event time": lambda S: S.from_(_Q("src")).window_tumbling(
        seconds=2.5, grace_period=1, event_time=_f, allowed_lateness=0.5, on_late="include").reduce(_f, 0).to(_Q("o")),
    "tumbling camelCase options": lambda S: S.from_(_Q("src")).window_tumbling(seconds=60, gracePeriod=5, idleFlushMs=0)
    .reduce(_f).to(_Q("out")),
    "sliding": lambda S: S.from_(_Q("src")).key_by(_f).window_sliding(size=60, slide=10).aggregate({"avg": _f}).to(_Q("o")),
    "session reduce dict initial": lambda S: S.from_(_Q("src")).window_session(gap=1.5).reduce(_f, {"n": 0}).map(_f)
    .to(_Q("out")),
    "cron hour": lambda S: S.from_(_Q("src")).window_cron(every="hour").aggregate({"count": _f, "total": _f}).foreach(_f),
    "cron week event time": lambda S: S.from_(_Q("src")).window_cron(every="week", event_time=_f, grace_period=60)
    .reduce(_f, []).to(_Q("weekly")),
    "token bucket gate": lambda S: S.from_(_Q("src")).gate(token_bucket_gate(capacity=3, refill_per_sec=2))
    .to(_Q("approved")),
    "sliding window gate + post map": lambda S: S.from_(_Q("src")).key_by(_f).gate(sliding_window_gate(limit=5, window_sec=1))
    .map(_f).to(_Q("ok")),
    "flat_map dedup chain": lambda S: S.from_(_Q("src")).filter(_f).map(_f).window_tumbling(seconds=5).reduce(_f, {})
    .flat_map(_f).to(_Q("out")),
    "non-ascii sink name": lambda S: S.from_(_Q("src")).map(_f).to(_Q("ausgänge-ü")),
    "window without reducer": lambda S: S.from_(_Q("src")).window_tumbling(seconds=1, idle_flush_ms=0).map(_f).to(_Q("o")),
    "no operators": lambda S: S.from_(_Q("src")),
}


def _official_hash(stream) -> str:
    from queen.streams.util.config_hash import config_hash_of

    return config_hash_of(stream._operators)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_config_hash_equals_official_0_15(name):
    build = CHAINS[name]
    ours = build(Stream)
    theirs = build(official.Stream)
    assert ours.config_hash() == _official_hash(theirs)


def test_at_least_ten_distinct_chains():
    hashes = {CHAINS[n](Stream).config_hash() for n in CHAINS}
    assert len(hashes) == len(CHAINS) >= 10


def test_hash_ignores_callables_but_not_options():
    a = Stream.from_(_Q("s")).window_tumbling(seconds=2).reduce(lambda acc, v: acc, 0)
    b = Stream.from_(_Q("s")).window_tumbling(seconds=2).reduce(lambda acc, v: acc + 1, 0)
    c = Stream.from_(_Q("s")).window_tumbling(seconds=3).reduce(lambda acc, v: acc, 0)
    d = Stream.from_(_Q("s")).window_tumbling(seconds=2.0).reduce(lambda acc, v: acc, 0)
    assert a.config_hash() == b.config_hash()
    assert a.config_hash() != c.config_hash()
    # like the official Python client: 2 and 2.0 are different chains (JSON "2" vs "2.0")
    assert a.config_hash() != d.config_hash()


def test_described_shape():
    s = Stream.from_(_Q("s")).window_tumbling(seconds=2, idle_flush_ms=1000).aggregate({"sum": _f}).to(_Q("o"))
    assert describe(s.operators) == [
        {"kind": "window-tumbling", "seconds": 2, "gracePeriod": 0, "idleFlushMs": 1000, "eventTime": False,
         "allowedLateness": 0, "onLate": "drop"},
        {"kind": "aggregate", "fields": ["sum"]},
        {"kind": "sink", "queue": "o"},
    ]


def test_capture_hash_of_the_tumbling_run():
    # streams-client-tumbling.q015.jsonl: window_tumbling(seconds=2, idle_flush_ms=1000) +
    # aggregate(count,sum,min,max) + map + .to(<out>), registered with this hash
    out = "wire-streams-client-tumbling-1a230cc16cb-out"
    s = (Stream.from_(_Q("wire-streams-client-tumbling-1a230cc16cb-src")).window_tumbling(seconds=2, idle_flush_ms=1000)
         .aggregate({"count": _f, "sum": _f, "min": _f, "max": _f}).map(_f).to(_Q(out)))
    assert s.config_hash() == "c9441a88b5fabd31c062ce9f0d3ff5904384f032fc5bbf217cd16a4930555a93"
