"""Static typing: the package type-checks with its mypy config, and a user program of the
public API passes ``mypy --strict`` (the package ships ``py.typed``).

Runs only where mypy is installed (the ``test`` extra pins it on Python >= 3.10) and only in
the default-backend pass (typing does not depend on the codec backend)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import queen_sync

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(bool(os.environ.get("QUEEN_SYNC_NO_EXTENSIONS")), reason="typing is checked in the default pass"),
]

mypy_api = pytest.importorskip("mypy.api")


def _package_dir() -> Path:
    return Path(queen_sync.__file__).resolve().parent


def test_py_typed_is_shipped() -> None:
    assert (_package_dir() / "py.typed").is_file()


def test_user_program_passes_mypy_strict(tmp_path: Path) -> None:
    env_path = str(_package_dir().parent)
    out, err, status = mypy_api.run(
        [
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--python-executable",
            sys.executable,
            str(ROOT / "tests" / "typing" / "user_program.py"),
        ]
        + (["--config-file", str(ROOT / "pyproject.toml")] if (ROOT / "pyproject.toml").is_file() else [])
    )
    assert status == 0, "mypy --strict on a user program failed (package at %s):\n%s%s" % (env_path, out, err)


@pytest.mark.skipif(not (ROOT / "queen_sync").is_dir(), reason="package sources not beside the tests (wheel test)")
def test_package_passes_its_mypy_config(tmp_path: Path) -> None:
    out, err, status = mypy_api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"), str(ROOT / "queen_sync")]
    )
    assert status == 0, out + err
