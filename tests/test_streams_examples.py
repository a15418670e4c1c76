"""The streams examples (``examples/streams/``) run end to end as subprocesses and report
PASS. Skipped while the broker they would use has no streams routes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import urllib3

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.name for p in (ROOT / "examples" / "streams").glob("[a-z]*.py"))


@pytest.fixture(scope="module", autouse=True)
def _needs_streams_routes() -> None:
    url = os.environ.get("QUEEN_URL")
    broker = None
    if not url:
        from queen_sync.testing import EmbeddedBroker

        broker = EmbeddedBroker().start()
        url = broker.url
    try:
        r = urllib3.request("POST", url.rstrip("/") + "/streams/v1/queries", body=b"{}", timeout=5.0, retries=False)
    finally:
        if broker is not None:
            broker.stop()
    if r.status == 404:
        pytest.skip("the broker has no /streams/v1 routes")


def test_all_examples_listed():
    assert len(EXAMPLES) == 9


@pytest.mark.parametrize("script", EXAMPLES)
def test_streams_example_passes(script: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "streams" / script)], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    lines = out.strip().splitlines()
    n_ok = sum(1 for line in lines if line.startswith("ok: "))
    assert lines[-1] == "PASS: %d checks" % n_ok
    assert n_ok >= 4
