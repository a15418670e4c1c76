"""Build script. The metadata lives in pyproject.toml; this file adds what cannot be static:

- the optional compiled codec ``queen_sync._ccodec`` (Cython source ``_speedups/_ccodec.pyx``).
  It is built when Cython is importable (it is a build requirement on CPython). A build
  without a working C compiler, or without Cython, still succeeds, with a warning on stderr:
  the wheel is then a **pure** one tagged ``py3-none-any`` (not a platform wheel without its
  ``.so``), and it carries a marker file (``queen_sync/_ccodec_not_built.txt``, the reason)
  that makes ``queen_sync.codec`` log one WARNING at import saying how to fix it. Set
  ``QUEEN_SYNC_REQUIRE_EXTENSIONS=1`` to make a failed extension build an error instead (wheel
  builds in CI do); set ``QUEEN_SYNC_NO_EXTENSIONS=1`` to build the pure package on purpose
  (no compile attempt, no marker, no warning).
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
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

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


#: Read by queen_sync/codec.py: present in an install whose compiled codec could not be built.
MARKER = "_ccodec_not_built.txt"

#: Why the compiled codec is missing from this build (empty: built, or skipped on purpose).
_FALLBACK_REASONS: list = []


def _write_marker(package_dir: str) -> None:
    os.makedirs(package_dir, exist_ok=True)
    with open(os.path.join(package_dir, MARKER), "w", encoding="utf-8") as f:
        f.write("%s\n" % "; ".join(_FALLBACK_REASONS))
        f.write("python %s (%s)\n" % (sys.version.split()[0], sys.executable))


def _remove_marker(package_dir: str) -> None:
    try:
        os.remove(os.path.join(package_dir, MARKER))
    except FileNotFoundError:
        pass


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
        for package_dir in self._package_dirs():
            if self._skipped:
                _write_marker(package_dir)
            else:
                _remove_marker(package_dir)  # a stale one from an earlier failed build

    def _package_dirs(self) -> list:
        if self.inplace:
            return [self.get_finalized_command("build_py").get_package_dir("queen_sync")]
        return [os.path.join(self.build_lib, "queen_sync")]

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
        _FALLBACK_REASONS.append("could not compile %s (%s: %s)" % (name, type(exc).__name__, str(exc)[:300]))
        _note(
            "WARNING: could not compile the optional extension %s (%s: %s). Installing the "
            "pure-Python codec instead (a py3-none-any wheel): everything works, the codec is "
            "just slower. Set QUEEN_SYNC_REQUIRE_EXTENSIONS=1 to make this an error."
            % (name, type(exc).__name__, exc)
        )


class marker_build_py(build_py):
    """``build_py`` that also writes the marker when the extension was not even attempted on
    CPython for want of Cython (no ``build_ext`` runs then)."""

    def run(self) -> None:
        super().run()
        if _NO_CYTHON and not self.editable_mode:
            _write_marker(os.path.join(self.build_lib, "queen_sync"))


class fallback_bdist_wheel(bdist_wheel):
    """``bdist_wheel`` that builds first and, when the extension could not be compiled, tags
    the wheel ``py3-none-any`` (pure): a platform-tagged wheel without its ``.so`` would be
    picked over a working build on every later install of that platform."""

    def run(self) -> None:
        if not self.skip_build:
            self.reinitialize_command("build_ext").inplace = False
            self.run_command("build")
            self.skip_build = True  # built: install must not compile (and warn) a second time
        if _FALLBACK_REASONS:
            self.root_is_pure = True
            _note("building a pure-Python wheel (py3-none-any): %s" % "; ".join(_FALLBACK_REASONS))
        super().run()


_NO_CYTHON = False


def _extensions() -> list:
    global _NO_CYTHON
    if sys.implementation.name != "cpython":
        return []
    if _truthy("QUEEN_SYNC_NO_EXTENSIONS"):
        if _truthy("QUEEN_SYNC_REQUIRE_EXTENSIONS"):
            raise RuntimeError("QUEEN_SYNC_NO_EXTENSIONS and QUEEN_SYNC_REQUIRE_EXTENSIONS are both set")
        _note("NOTE: QUEEN_SYNC_NO_EXTENSIONS is set; building the pure-Python package on purpose.")
        return []
    if not HAVE_CYTHON:
        if _truthy("QUEEN_SYNC_REQUIRE_EXTENSIONS"):
            raise RuntimeError("QUEEN_SYNC_REQUIRE_EXTENSIONS is set but Cython is not installed")
        _note("WARNING: Cython is not installed; skipping the optional compiled codec (pure-Python codec only).")
        _NO_CYTHON = True
        _FALLBACK_REASONS.append("Cython was not installed at build time")
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
    cmdclass={"build_ext": optional_build_ext, "build_py": marker_build_py, "bdist_wheel": fallback_bdist_wheel},
    install_requires=_dependencies(),
)
