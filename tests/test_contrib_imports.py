"""The framework integrations are optional: ``import queen_sync`` (and its testing and
contrib packages) imports neither Flask nor Django; each contrib module imports only its own
framework."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHECK = """
import sys
{imports}
frameworks = ("flask", "werkzeug", "django", "gunicorn")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in frameworks)
print(",".join(sorted({{m.split(".")[0] for m in loaded}})))
"""


def loaded_after(imports: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(
        [sys.executable, "-c", CHECK.format(imports=imports)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_import_queen_sync_loads_no_framework() -> None:
    assert loaded_after("import queen_sync, queen_sync.testing, queen_sync.contrib") == ""


def test_flask_contrib_loads_only_flask() -> None:
    pytest.importorskip("flask")
    assert loaded_after("import queen_sync.contrib.flask") == "flask,werkzeug"


def test_django_contrib_loads_only_django() -> None:
    pytest.importorskip("django")
    assert loaded_after("import queen_sync.contrib.django, queen_sync.contrib.django.apps") == "django"
