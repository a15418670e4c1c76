"""Codec backend selection on installs without a working compiled codec (child interpreters
importing a copy of the package, so the tree under test is never altered)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import queen_sync

_CHILD = """
import sys
# An editable install (pip install -e) adds a meta-path finder that would still map
# queen_sync._ccodec to the source tree's compiled module: keep only the copy under test.
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()
                    and "editable" not in getattr(type(f), "__module__", "").lower()]
import logging
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
import queen_sync
print(queen_sync.codec_backend)
"""


def _copy_package(dest: Path) -> Path:
    """A copy of the queen_sync sources under ``dest`` without any compiled module."""
    src = Path(queen_sync.__file__).resolve().parent
    shutil.copytree(src, dest / "queen_sync", ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    return dest / "queen_sync"


def _run_child(root: Path) -> "subprocess.CompletedProcess[str]":
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_SYNC_")}
    env["PYTHONPATH"] = str(root)
    return subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, cwd=str(root), capture_output=True, text=True, timeout=60
    )


def test_no_compiled_codec_is_silent(tmp_path: Path) -> None:
    # a pure install (PyPy, sdist built without a compiler) must not warn on import
    _copy_package(tmp_path)
    out = _run_child(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "python"
    assert "queen_sync.codec" not in out.stderr, out.stderr


def test_broken_compiled_codec_warns(tmp_path: Path) -> None:
    # a compiled module that exists but cannot load is worth a warning (then the pure codec)
    pkg = _copy_package(tmp_path)
    (pkg / ("_ccodec" + sysconfig.get_config_var("EXT_SUFFIX"))).write_bytes(b"not a shared object")
    out = _run_child(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "python"
    assert "WARNING queen_sync.codec compiled codec queen_sync._ccodec failed to import" in out.stderr, out.stderr


_CHILD_NO_LOGGING = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()
                    and "editable" not in getattr(type(f), "__module__", "").lower()]
import queen_sync
import queen_sync.codec, queen_sync.client  # importing more modules must not warn again
print(queen_sync.codec_backend)
"""


def test_failed_build_marker_warns_once_at_import(tmp_path: Path) -> None:
    # setup.py leaves this marker when the compile failed: the pure codec is then an accident
    pkg = _copy_package(tmp_path)
    (pkg / "_ccodec_not_built.txt").write_text("could not compile queen_sync._ccodec (CompileError: boom)\n")
    out = _run_child(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "python"
    lines = [line for line in out.stderr.splitlines() if "queen_sync.codec" in line]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("WARNING queen_sync.codec queen_sync is running its pure-Python codec"), lines
    assert "CompileError: boom" in lines[0] and "install a C compiler" in lines[0]
    # with logging left unconfigured (a plain script) it still reaches stderr, once
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_SYNC_")}
    env["PYTHONPATH"] = str(tmp_path)
    plain = subprocess.run(
        [sys.executable, "-c", _CHILD_NO_LOGGING], env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.count("running its pure-Python codec") == 1, plain.stderr
    # choosing the pure codec on purpose silences it
    env["QUEEN_SYNC_NO_EXTENSIONS"] = "1"
    chosen = subprocess.run(
        [sys.executable, "-c", _CHILD_NO_LOGGING], env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert chosen.returncode == 0 and chosen.stdout.strip() == "python", chosen.stderr
    assert "pure-Python codec" not in chosen.stderr, chosen.stderr
