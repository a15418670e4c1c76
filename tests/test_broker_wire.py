"""The embedded broker answers like the captured real Queen broker (field names, shapes, semantics).

Replays a fast subset of the real-broker captures (``shared/wire``) with
``shared/tools/replay_wire.py`` against a fresh embedded broker and requires every replayed
exchange to match (ids and timestamps aside, as the tool compares them). Skipped when the
``shared/`` folder (which sits beside the repository) is absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# The nearest ``shared/`` folder above the repository (a git worktree may sit one level deeper).
REPLAY = next((p / "shared" / "tools" / "replay_wire.py" for p in Path(__file__).resolve().parents[1:]
               if (p / "shared" / "tools" / "replay_wire.py").is_file()), Path("shared/tools/replay_wire.py"))

# Core routes, the admin session and the quick Streams scenarios; each takes at most a few
# seconds to replay (the full set, lease expiries included, is replayed by hand: see the README).
FAST_CAPTURES = [
    "push-*", "pop-queue-mode", "pop-batch", "pop-consumer-group", "pop-named-partition", "pop-empty-nowait",
    "pop-wildcard-partitions", "ack-success", "ack-unknown", "ack-batch", "transaction-commit",
    "transaction-errors", "transaction-already-acked", "configure-minimal", "queue-configure-delete",
    "errors-malformed", "dlq-retry-limit", "dlq-disabled", "consumer-group-admin", "admin-*",
    "streams-register", "streams-state-get", "streams-cycle", "streams-cycle-errors", "streams-sink-dedup",
]


@pytest.mark.skipif(not REPLAY.is_file(), reason="shared/tools/replay_wire.py not available")
def test_core_and_admin_routes_match_the_real_broker_captures(embedded_broker) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPLAY), "--url", embedded_broker.url, "--json", "--only", *FAST_CAPTURES],
        capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["total"] > 200  # the selection really ran
    diffs = [
        "%s #%s %s %s: %s" % (c["name"], d["seq"], d["method"], d["path"],
                              "; ".join("%s: captured %r got %r" % (x["json_path"], x["captured"], x["got"])
                                        for x in d["differences"][:4]))
        for c in report["captures"] for d in c["diffs"]
    ]
    assert not diffs, "\n".join(diffs)
    assert report["matched"] == report["total"]
