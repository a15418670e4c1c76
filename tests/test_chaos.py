"""Chaos test (issue 11, item 10): producers (buffered and not) and consumers on one client
against the embedded broker, under a seeded schedule of lost replies, 503s, dropped
connections, slow replies and broker restarts. See ``tests/_chaos.py`` for what is checked
and how each redelivery is accounted for (a fault injected on an ack or renewal of its lease,
or an ack the broker refused because that lease had expired; anything else fails).

``QUEEN_CHAOS_SEED`` (default 11) and ``QUEEN_CHAOS_SECONDS`` (default 12: chaos phase, ~15-20 s
in all, bounded under 30 s) choose the run; ``python benchmarks/chaos.py`` runs longer ones and
many seeds.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from _chaos import ChaosConfig, run_chaos


def test_chaos_every_message_stored_once_handled_at_least_once(embedded_broker: Any) -> None:
    cfg = ChaosConfig(seed=int(os.environ.get("QUEEN_CHAOS_SEED", "11")),
                      seconds=float(os.environ.get("QUEEN_CHAOS_SECONDS", "12")))
    report = run_chaos(cfg, embedded_broker)
    print(report.text())
    assert not report.failures, report.text(schedule=True)
    # the run really was chaotic: the schedule restarted the broker and faults hit requests
    assert report.figures["restarts"].split()[0] != "0"
    assert not report.figures["faults applied"].startswith("0 ")
