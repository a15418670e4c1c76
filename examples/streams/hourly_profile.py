"""Per-entity hourly profile: a wall-clock aligned (cron) window per customer and hour.

``window_cron(every="hour")`` aligns windows to the UTC hour; ``reduce`` merges each event
into the customer's profile (event count, amount, tags); ``foreach`` writes each finished
profile (here: into a list; at least once, before the cycle commits).

Blocking port of the official SDK's ``examples/05_per_entity_hourly_profile.py`` (event
time, so the hours are exact). Run with ``QUEEN_URL=... python examples/streams/hourly_profile.py``.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List

from _common import T0, Checks, Queen, run_example, wait_until

from queen_sync import Stream

HOUR = 3600000
HOUR0 = T0 - 50 * 60000  # 08:00:00Z
EVENTS = [  # (customer, ms after 08:00, amount, tags)
    ("c1", 5 * 60000, 10, ["web"]), ("c1", 59 * 60000, 5, ["app"]), ("c2", 30 * 60000, 7, []),
    ("c1", HOUR, 1, ["web"]), ("c2", HOUR + 1, 2, ["app", "web"]),
]


def merge(acc: Dict[str, Any], v: Dict[str, Any]) -> Dict[str, Any]:
    acc["events"] += 1
    acc["amount"] += v["amount"]
    acc["tags"] = sorted(set(acc["tags"]) | set(v["tags"]))
    return acc


def run(q: Queen, checks: Checks, suffix: str) -> None:
    src = "account-events-%s" % suffix
    for c, off, amount, tags in EVENTS:
        q.queue(src).partition(c).push({"data": {"ts": HOUR0 + off, "amount": amount, "tags": tags}})
    for c in ("c1", "c2"):
        q.queue(src).partition(c).push({"data": {"ts": HOUR0 + 5 * HOUR, "amount": 0, "tags": []}})
    profiles: List[Dict[str, Any]] = []
    runner = (Stream.from_(q.queue(src))
              .window_cron(every="hour", event_time=lambda m: m["data"]["ts"], idle_flush_ms=0)
              .reduce(merge, {"events": 0, "amount": 0, "tags": []})
              .foreach(lambda profile, ctx: profiles.append(
                  {"customer": ctx["partition"], "hour": (ctx["windowStart"] - HOUR0) // HOUR, **profile}))
              .run("profiles-%s" % suffix, max_wait_millis=200))
    with runner:
        wait_until(lambda: len(profiles) >= 4)
    got = sorted((p["customer"], p["hour"], p["events"], p["amount"], tuple(p["tags"])) for p in profiles)
    checks.check(got == [("c1", 0, 2, 15, ("app", "web")), ("c1", 1, 1, 1, ("web",)), ("c2", 0, 1, 7, ()),
                         ("c2", 1, 1, 2, ("app", "web"))], "one profile per customer and UTC hour", got)
    checks.check(all((p["hour"] * HOUR + HOUR0) % HOUR == 0 for p in profiles), "windows start on the hour")
    checks.check(len(profiles) == 4, "each profile written once")
    checks.check(runner.metrics()["stateOpsTotal"] >= 2, "open hours kept in the broker's state until they closed")
    checks.check(runner.metrics()["messagesTotal"] == 7 and runner.metrics()["errorsTotal"] == 0,
                 "7 events consumed, no errors", runner.metrics())


if __name__ == "__main__":
    sys.exit(run_example(run))
