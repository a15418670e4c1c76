"""The README's "Testing your code" and "Command line" sections, executed: the Python block
runs as a user's test file under pytest (the plugin found through its entry point, no
conftest), and the shell block runs with bash against a fresh embedded broker. The opening
example of docs/streams.md runs as a script against a fresh embedded broker too (its other
block, "Porting an official async pipeline", is a side-by-side comparison, not a script)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, List

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
STREAMS_DOC = README.parent / "docs" / "streams.md"

pytestmark = pytest.mark.skipif(not README.is_file(), reason="not a source checkout (no README.md)")


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## %s\n" % title)
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _blocks(section: str, lang: str) -> List[str]:
    return re.findall(r"```%s\n(.*?)```" % re.escape(lang), section, flags=re.S)


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "QUEEN_BEARER"))}


def test_testing_your_code_snippet_passes_under_pytest(tmp_path: Path) -> None:
    blocks = _blocks(_section("Testing your code"), "python")
    assert blocks, "no python block in the README's 'Testing your code' section"
    for i, code in enumerate(blocks):
        (tmp_path / ("test_readme_%d.py" % i)).write_text(code, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_env(),
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    tests = len(re.findall(r"^def test_", "".join(blocks), flags=re.M))
    if os.environ.get("QUEEN_URL"):
        assert re.search(r"\d+ passed", out), out[-2000:]
    else:
        assert "%d passed" % tests in out and "skipped" not in out, out[-2000:]


def test_command_line_snippet_runs(embedded_broker: Any, tmp_path: Path) -> None:
    blocks = _blocks(_section("Command line"), "sh")
    assert blocks, "no sh block in the README's 'Command line' section"
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("needs bash")
    env = _env()
    env["QUEEN_URL"] = embedded_broker.url
    bindir = Path(sys.executable).parent
    env["PATH"] = str(bindir) + os.pathsep + env.get("PATH", "")
    prelude = "set -euo pipefail\n"
    if not (bindir / "queen-sync").exists():  # e.g. an interpreter without the console script
        prelude += 'queen-sync() { %s -m queen_sync "$@"; }\n' % sys.executable
    script = prelude + "\n".join(blocks)
    run = subprocess.run([bash, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "error" not in run.stderr.lower().replace("0 nacked", ""), run.stderr
    # what the snippet says happened, happened
    pushed = [m["data"] for m in embedded_broker.messages("orders")]
    assert sorted(p["order"] for p in pushed) == ["A-1", "A-2", "A-3"]
    mailed = [json.loads(line) for line in (tmp_path / "mailed.jsonl").read_text().splitlines()]
    assert sorted(m["data"]["order"] for m in mailed) == ["A-1", "A-2", "A-3"]


def test_streams_doc_opening_snippet_runs(embedded_broker: Any, tmp_path: Path) -> None:
    if not STREAMS_DOC.is_file():
        pytest.skip("no docs/streams.md")
    text = STREAMS_DOC.read_text(encoding="utf-8")
    blocks = _blocks(text[: text.index("\n## ")], "python")  # before the first section
    assert blocks, "no python block at the top of docs/streams.md"
    env = _env()
    env["QUEEN_URL"] = embedded_broker.url
    for i, code in enumerate(blocks):
        script = tmp_path / ("streams_doc_%d.py" % i)
        script.write_text(code, encoding="utf-8")
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                             cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert "'stopReason': 'stopped'" in run.stdout, run.stdout[-3000:]
