"""Build script. The metadata lives in pyproject.toml; this file adds what cannot be static:

- the optional compiled codec ``queen_sync._ccodec`` (Cython source ``_speedups/_ccodec.pyx``).
  It is built when Cython is importable (it is a build requirement on CPython). A build
  without a working C compiler, or without Cython, still succeeds and installs the pure-Python
  codec, with a warning on stderr. Set ``QUEEN_SYNC_REQUIRE_EXTENSIONS=1`` to make a failed
  extension build an error instead (wheel builds in CI do).
- the runtime dependencies (``dynamic = ["dependencies"]``): orjson is required on CPython
  with the GIL only. No standard environment marker can tell a free-threaded CPython apart
  yet (PEP 780's ``sys_abi_features`` is a draft that pip does not understand), and orjson
  publishes no free-threaded wheels, so the requirement is decided here, on the interpreter
  the wheel is built for; free-threaded builds and PyPy use the stdlib ``json``.
"""

from __future__ import annotations

import os
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:  # setuptools >= 59 re-exports the distutils error classes
    from setuptools.errors import CCompilerError, CompileError, ExecError, LinkError, PlatformError
except ImportError:  # pragma: no cover - very old setuptools
    from distutils.errors import (  # type: ignore[no-redef]
        CCompilerError,
        CompileError,
        DistutilsExecError as ExecError,
        DistutilsPlatformError as PlatformError,
        LinkError,
    )

_BUILD_ERRORS: tuple = (CCompilerError, CompileError, ExecError, LinkError, PlatformError, OSError)
try:
    from Cython.Compiler.Errors import CompileError as _CythonCompileError

    _BUILD_ERRORS += (_CythonCompileError,)
    HAVE_CYTHON = True
except ImportError:
    HAVE_CYTHON = False


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _note(message: str) -> None:
    sys.stderr.write("\n*** queen_sync: %s\n\n" % message)
    sys.stderr.flush()


class optional_build_ext(build_ext):
    """``build_ext`` that turns a failed compile into a warning: the package falls back to
    the pure-Python codec (``queen_sync.codec_backend == "python"``)."""

    def initialize_options(self) -> None:
        super().initialize_options()
        self._skipped: set = set()

    def run(self) -> None:
        try:
            super().run()
        except _BUILD_ERRORS as exc:
            self._failed(exc)
            self._skipped.update(ext.name for ext in self.extensions)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except _BUILD_ERRORS as exc:
            self._failed(exc, ext.name)
            self._skipped.add(ext.name)

    def _built(self) -> list:
        return [ext for ext in self.extensions if ext.name not in self._skipped]

    def copy_extensions_to_source(self) -> None:  # --inplace / editable installs
        all_extensions, self.extensions = self.extensions, self._built()
        try:
            super().copy_extensions_to_source()
        finally:
            self.extensions = all_extensions

    def get_outputs(self) -> list:
        all_extensions, self.extensions = self.extensions, self._built()
        try:
            return super().get_outputs()
        finally:
            self.extensions = all_extensions

    def _failed(self, exc: BaseException, name: str = "queen_sync._ccodec") -> None:
        if _truthy("QUEEN_SYNC_REQUIRE_EXTENSIONS"):
            raise exc
        _note(
            "WARNING: could not compile the optional extension %s (%s: %s). Installing the "
            "pure-Python codec instead: everything works, the codec is just slower."
            % (name, type(exc).__name__, exc)
        )


def _extensions() -> list:
    if sys.implementation.name != "cpython":
        return []
    if not HAVE_CYTHON:
        if _truthy("QUEEN_SYNC_REQUIRE_EXTENSIONS"):
            raise RuntimeError("QUEEN_SYNC_REQUIRE_EXTENSIONS is set but Cython is not installed")
        _note("NOTE: Cython is not installed; skipping the optional compiled codec (pure-Python codec only).")
        return []
    return [Extension("queen_sync._ccodec", ["_speedups/_ccodec.pyx"])]


def _dependencies() -> list:
    deps = ["urllib3>=2"]
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        # no orjson wheels for free-threaded builds; the marker still keeps PyPy on stdlib json
        deps.append("orjson>=3.9; platform_python_implementation == 'CPython'")
    return deps


setup(
    ext_modules=_extensions(),
    cmdclass={"build_ext": optional_build_ext},
    install_requires=_dependencies(),
)
