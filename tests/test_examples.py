"""The examples run end to end as subprocesses and report PASS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["multi_queue_flow.py", "transaction_ack_push.py"]


@pytest.mark.parametrize("script", EXAMPLES)
def test_example_passes(script: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    lines = out.strip().splitlines()
    n_ok = sum(1 for line in lines if line.startswith("ok: "))
    assert lines[-1] == "PASS: %d checks" % n_ok
    assert n_ok >= 5
