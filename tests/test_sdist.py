"""The sdist installs without a C compiler: the build skips the extension with a warning,
the wheel it makes is a pure ``py3-none-any`` one, and the installed package runs on the
pure-Python codec and says so with one WARNING at import.

Builds the sdist (``python -m build --sdist``), builds a wheel from it with
``CC=/bin/false CXX=/bin/false`` (``pip wheel``: pip fetches setuptools / Cython from its
cache or PyPI), installs that wheel into a fresh venv, then in that venv checks
``codec_backend == "python"``, the import-time warning, a codec round trip and a push/pop
round trip through the embedded broker.

Slow (~20-60 s), so it runs once per CI run: it is skipped when ``QUEEN_SYNC_NO_EXTENSIONS``
(the pure-backend pass) or ``QUEEN_SYNC_SKIP_SDIST_TEST`` (wheel tests) is set, and when not
run from a source checkout.
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
    pytest.mark.skipif(_set("QUEEN_SYNC_NO_EXTENSIONS"), reason="sdist check runs in the default-backend pass only"),
    pytest.mark.skipif(_set("QUEEN_SYNC_SKIP_SDIST_TEST"), reason="QUEEN_SYNC_SKIP_SDIST_TEST is set"),
    pytest.mark.skipif(
        not (ROOT / "setup.py").is_file() or not (ROOT / "_speedups").is_dir(), reason="not a source checkout"
    ),
    pytest.mark.skipif(sys.implementation.name != "cpython", reason="checks the CPython no-compiler fallback"),
]

CHILD = r"""
import os, sys
import queen_sync  # logging unconfigured: the warning reaches stderr through the last resort
from queen_sync import codec

assert "site-packages" in queen_sync.__file__, queen_sync.__file__
assert queen_sync.codec_backend == "python", queen_sync.codec_backend
try:
    import queen_sync._ccodec
except ImportError:
    pass
else:
    raise AssertionError("a compiled codec was installed although no compiler was available")

ids = iter(["tx-1", "tx-2"])
body, sent = codec.encode_push("q", "p", [{"data": {"n": 1, "s": "\u00e9"}}, {"payload": None}], lambda: next(ids))
assert body == (b'{"items":[{"queue":"q","partition":"p","payload":{"n":1,"s":"\xc3\xa9"},"transactionId":"tx-1"},'
                b'{"queue":"q","partition":"p","payload":null,"transactionId":"tx-2"}]}'), body
assert sent == ["tx-1", "tx-2"], sent
assert codec.decode_pop(b'{"success":true,"messages":[{"id":"m","data":{"n":1}}]}') == [{"id": "m", "data": {"n": 1}}]

from queen_sync import Queen
from queen_sync.testing import EmbeddedBroker

with EmbeddedBroker() as broker, Queen(broker.url) as q:
    q.queue("sdist-check").partition("p").push({"data": {"hello": "world"}})
    msgs = q.queue("sdist-check").partition("p").batch(1).pop()
    assert [m["data"] for m in msgs] == [{"hello": "world"}], msgs
    q.ack(msgs[0], True)
print("SDIST-OK", queen_sync.codec_backend)
"""


def test_sdist_installs_pure_without_compiler(tmp_path: Path) -> None:
    pytest.importorskip("build")
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--outdir", str(dist), str(ROOT)],
        capture_output=True, text=True, timeout=180,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (sdist,) = glob.glob(str(dist / "*.tar.gz"))

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEEN_SYNC_", "PYTHON", "VIRTUAL_ENV"))}
    env.update({"CC": "/bin/false", "CXX": "/bin/false", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    wheels = tmp_path / "wheels"
    wheel = subprocess.run(
        [py, "-m", "pip", "wheel", "-v", "--no-deps", "--wheel-dir", str(wheels), sdist],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )
    output = wheel.stdout + wheel.stderr
    assert wheel.returncode == 0, output[-4000:]
    assert "could not compile the optional extension queen_sync._ccodec" in output, output[-4000:]
    assert "building a pure-Python wheel (py3-none-any)" in output, output[-4000:]
    (built,) = glob.glob(str(wheels / "*.whl"))
    # not cp3xx-cp3xx-linux_x86_64: a platform wheel without its .so would shadow real builds
    assert Path(built).name == "queen_sync-0.1.0-py3-none-any.whl", built

    install = subprocess.run(
        [py, "-m", "pip", "install", built], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path
    )
    assert install.returncode == 0, (install.stdout + install.stderr)[-4000:]

    run = subprocess.run([py, "-c", CHILD], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "SDIST-OK python" in run.stdout
    assert run.stderr.count("queen_sync is running its pure-Python codec because the compiled one could not") == 1, run.stderr
    assert "could not compile queen_sync._ccodec" in run.stderr, run.stderr
