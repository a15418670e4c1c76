"""The codec interface: picks the compiled backend or its pure-Python twin at import time.

- ``queen_sync._ccodec`` (Cython, built from ``_speedups/``) is used when importable;
- ``QUEEN_SYNC_NO_EXTENSIONS=1`` forces the pure backend (``queen_sync._pycodec``);
- ``QUEEN_SYNC_REQUIRE_EXTENSIONS=1`` turns a missing compiled backend into ``ImportError``.

A missing compiled backend is silent where it is expected (PyPy, a pure build on purpose),
and logs one WARNING at import where the build tried and failed: setup.py then leaves a
marker file (``_ccodec_not_built.txt``, holding the reason) in the package.

Every wire body of the client is built and read through the names re-exported here; see
``queen_sync._pycodec`` for their contracts. ``BACKEND`` is ``"cython"`` or ``"python"``.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType
from typing import TYPE_CHECKING

from . import _pycodec

_log = logging.getLogger("queen_sync.codec")
_CCODEC = __name__.rpartition(".")[0] + "._ccodec"
#: written by setup.py into an install whose compiled codec could not be built
_NOT_BUILT_MARKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ccodec_not_built.txt")

__all__ = ["BACKEND", "IMPL", "is_compiled", "load_backend"] + list(_pycodec.__all__)


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def load_backend(name: str) -> ModuleType:
    """Return the codec module named ``"cython"`` or ``"python"`` (for tests that compare
    both). Raises ImportError when the compiled one is not built."""
    if name == "python":
        return _pycodec
    if name == "cython":
        # import_module, not ``from . import _ccodec``: a missing module must raise
        # ModuleNotFoundError (the from-import turns it into a plain ImportError)
        return importlib.import_module(_CCODEC)
    raise ValueError("unknown codec backend %r" % (name,))


def _select() -> ModuleType:
    if _truthy("QUEEN_SYNC_NO_EXTENSIONS"):
        if _truthy("QUEEN_SYNC_REQUIRE_EXTENSIONS"):
            raise ImportError("QUEEN_SYNC_NO_EXTENSIONS and QUEEN_SYNC_REQUIRE_EXTENSIONS are both set")
        return _pycodec
    try:
        return load_backend("cython")
    except ImportError as exc:
        # not built: silent; built but not loadable (or missing a module it needs): worth a word
        if not (isinstance(exc, ModuleNotFoundError) and exc.name == _CCODEC):
            _log.warning("compiled codec queen_sync._ccodec failed to import (%s); using the pure-Python codec", exc)
        else:
            _warn_if_build_failed()
        if _truthy("QUEEN_SYNC_REQUIRE_EXTENSIONS"):
            raise ImportError(
                "QUEEN_SYNC_REQUIRE_EXTENSIONS is set but the compiled codec queen_sync._ccodec is not importable"
            ) from None
        return _pycodec


def _warn_if_build_failed() -> None:
    try:
        with open(_NOT_BUILT_MARKER, encoding="utf-8", errors="replace") as f:
            reason = f.readline().strip()[:400]
    except OSError:  # no marker: not attempted (PyPy, pure on purpose) or not an install
        return
    # Logged before queen_sync adds its NullHandler: with logging unconfigured, Python's
    # last-resort handler prints it on stderr.
    _log.warning(
        "queen_sync is running its pure-Python codec because the compiled one could not be built "
        "when it was installed (%s); JSON bodies are built about 4x slower. To fix: install a C "
        "compiler and the Python headers, then reinstall (pip install --force-reinstall "
        "--no-cache-dir queen-sync), or install a prebuilt wheel; set QUEEN_SYNC_NO_EXTENSIONS=1 "
        "to choose the pure codec and silence this.",
        reason or "reason unknown",
    )


IMPL: ModuleType = _select()
BACKEND: str = "python" if IMPL is _pycodec else "cython"


def is_compiled() -> bool:
    """True when the compiled (Cython) codec is active."""
    return BACKEND == "cython"


if TYPE_CHECKING:  # the names below, as type checkers should see them (same API in both backends)
    from ._pycodec import *  # noqa: F401,F403

for _name in _pycodec.__all__:
    globals()[_name] = getattr(IMPL, _name)
del _name
