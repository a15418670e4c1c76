"""The wheel ships the pytest plugin and the command line: build it, install it with pytest in
a fresh venv, and run there a user's test file (no conftest) that uses the plugin's fixtures
(found through the ``pytest11`` entry point) and the ``queen-sync`` console script.

The wheel is built without a C compiler (``CC=/bin/false``: the pure-Python codec), which
keeps this test well under a minute; the compiled wheels are checked by cibuildwheel. Like
``test_sdist.py`` it runs once per CI run: skipped in the pure-backend pass, when
``QUEEN_SYNC_SKIP_SDIST_TEST`` is set (wheel test runs) and outside a source checkout.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _set(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


pytestmark = [
    pytest.mark.skipif(_set("QUEEN_SYNC_NO_EXTENSIONS"), reason="runs in the default-backend pass only"),
    pytest.mark.skipif(_set("QUEEN_SYNC_SKIP_SDIST_TEST"), reason="QUEEN_SYNC_SKIP_SDIST_TEST is set"),
    pytest.mark.skipif(not (ROOT / "setup.py").is_file(), reason="not a source checkout"),
]

USER_TESTS = r'''
import json, os, subprocess, sys, sysconfig
from pathlib import Path

import queen_sync
import queen_sync.pytest_plugin


def test_plugin_comes_from_the_installed_wheel(request):
    assert request.config.pluginmanager.get_plugin("queen_sync") is queen_sync.pytest_plugin
    assert "site-packages" in queen_sync.__file__, queen_sync.__file__
    assert not Path(__file__).with_name("conftest.py").exists()


def test_fixtures(queen, queen_queue, queen_broker, queen_faults):
    assert queen_broker.embedded is not None and queen.urls == [queen_broker.url]
    fault = queen_faults.add("POST", "/api/v1/push", "status", status=503, times=1)
    queen.queue(queen_queue).push({"data": {"n": 1}})
    assert fault.hits == 1
    assert [m["data"] for m in queen.queue(queen_queue).batch(1).pop()] == [{"n": 1}]


def test_command_line(queen_broker, queen_queue):
    script = Path(sysconfig.get_path("scripts")) / "queen-sync"
    env = dict(os.environ, QUEEN_URL=queen_broker.url)
    push = subprocess.run([str(script), "push", queen_queue, '{"via": "cli"}'], capture_output=True,
                          text=True, env=env, timeout=60)
    assert push.returncode == 0, push.stderr
    pop = subprocess.run([sys.executable, "-m", "queen_sync", "pop", queen_queue, "--ack"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert pop.returncode == 0, pop.stderr
    assert json.loads(pop.stdout)["data"] == {"via": "cli"}
'''


def test_wheel_ships_plugin_and_command_line(tmp_path: Path) -> None:
    pytest.importorskip("build")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEEN_", "PYTHON", "VIRTUAL_ENV", "PYTEST_"))}
    env.update({"CC": "/bin/false", "CXX": "/bin/false", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
        capture_output=True, text=True, timeout=240, env=env,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = glob.glob(str(dist / "*.whl"))

    venv = tmp_path / "venv"
    # no pip in the new venv: this interpreter's pip installs into it (--python), from its cache
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", py, "install", "-q", wheel, "pytest"],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    work = tmp_path / "user"
    work.mkdir()
    (work / "test_user.py").write_text(USER_TESTS, encoding="utf-8")
    run = subprocess.run(
        [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        capture_output=True, text=True, timeout=180, env=env, cwd=work,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert "3 passed" in out, out[-2000:]
