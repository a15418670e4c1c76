"""Threshold alerting: a 30-second average CPU per host; an alert when it is above 90.

``reduce`` folds ``{sum, count}`` per host (partition) and window; the post-reducer ``map``
turns a window into an alert or ``None`` and ``filter`` drops the ``None`` s, so only hot
windows reach the alerts queue.

Blocking port of the official SDK's ``examples/03_threshold_alerting.py`` (event time here,
so the windows are exact). Run with ``QUEEN_URL=... python examples/streams/threshold_alerting.py``.
"""

from __future__ import annotations

import sys

from _common import T0, Checks, Queen, drain, run_example, wait_until

from queen_sync import Stream

SAMPLES = {  # host -> per 30-s window, the CPU samples
    "web-1": [[95, 97, 99], [50, 60, 70], [91, 92]],
    "web-2": [[10, 20], [90, 90, 90], [100, 81]],
}


def run(q: Queen, checks: Checks, suffix: str) -> None:
    src, alerts = "cpu-%s" % suffix, "cpu-alerts-%s" % suffix
    for host, windows in SAMPLES.items():
        items = [{"data": {"ts": T0 + w * 30000 + i * 1000, "value": v}}
                 for w, vals in enumerate(windows) for i, v in enumerate(vals)]
        items.append({"data": {"ts": T0 + 10 * 30000, "value": 0}})  # moves the watermark past them all
        q.queue(src).partition(host).push(items)

    def severity(agg, ctx):
        avg = agg["sum"] / agg["count"]
        if avg <= 90:
            return None
        return {"host": ctx["partition"], "window": (ctx["windowStart"] - T0) // 30000, "avg": avg,
                "samples": agg["count"]}

    runner = (Stream.from_(q.queue(src))
              .window_tumbling(seconds=30, event_time=lambda m: m["data"]["ts"], idle_flush_ms=0)
              .reduce(lambda acc, v: {"sum": acc["sum"] + v["value"], "count": acc["count"] + 1}, {"sum": 0, "count": 0})
              .map(severity)
              .filter(lambda v: v is not None)
              .to(q.queue(alerts))
              .run("cpu-alerts-%s" % suffix, max_wait_millis=200))
    with runner:
        wait_until(lambda: runner.metrics()["messagesTotal"] == 17 and runner.metrics()["cyclesTotal"] >= 2)
    got = sorted((m["data"]["host"], m["data"]["window"], m["data"]["avg"], m["data"]["samples"]) for m in drain(q, alerts))
    checks.check(got == [("web-1", 0, 97.0, 3), ("web-1", 2, 91.5, 2), ("web-2", 2, 90.5, 2)],
                 "exactly the three windows averaging above 90 alerted", got)
    checks.check(not any(h == "web-2" and w == 1 for h, w, _, _ in got), "an average of exactly 90 is no alert")
    checks.check(runner.metrics()["pushItemsTotal"] == 3, "three alerts pushed, no more", runner.metrics())
    checks.check(runner.metrics()["errorsTotal"] == 0, "no errors")


if __name__ == "__main__":
    sys.exit(run_example(run))
