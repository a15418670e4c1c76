"""The import structure of ``queen_sync/``: layers without circles.

Read with ``ast`` from the sources (nothing is imported): every import between the
package's modules, at module level or inside a function, those under ``if TYPE_CHECKING:``
included (a type-only import is still a dependency a reader must follow, and a circle
through one is a circle). Importing ``a.b.c`` also runs the package ``a.b`` (unless the
importer lives in it), so that edge is counted too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG_DIR = ROOT / "queen_sync"
PKG = "queen_sync"

pytestmark = pytest.mark.skipif(not PKG_DIR.is_dir(), reason="package sources not beside the tests (wheel test)")

#: Modules that may import the client: the package's front door, the framework integrations
#: and the embedded broker's package (which must not, see the test below).
CLIENT_IMPORTERS = ("queen_sync", "queen_sync.contrib", "queen_sync.testing")

#: Tools built on the public API, above the façade (they import ``queen_sync``, never the
#: client module itself): the command line and the pytest plugin.
ABOVE_THE_CLIENT = ("queen_sync.cli", "queen_sync.__main__", "queen_sync.pytest_plugin")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> Dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG_DIR.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[Tuple[ast.stmt, bool, bool]]:
    """(import statement, inside a function, under ``if TYPE_CHECKING:``) for every import."""

    def walk(node: ast.AST, in_function: bool, type_only: bool) -> Iterator[Tuple[ast.stmt, bool, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.body:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), in_function, True)
                for sub in child.orelse:  # the else branch runs
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), in_function, type_only)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function, type_only
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from walk(child, inner, type_only)

    yield from walk(tree, False, False)


def _targets(module: str, is_package: bool, stmt: ast.stmt, known: Set[str]) -> List[str]:
    """The package modules an import statement of ``module`` loads."""
    out: List[str] = []
    if isinstance(stmt, ast.Import):
        out = [a.name for a in stmt.names]
    elif isinstance(stmt, ast.ImportFrom):
        if stmt.level:
            base_parts = module.split(".") if is_package else module.split(".")[:-1]
            base_parts = base_parts[: len(base_parts) - (stmt.level - 1)]
            base = ".".join(base_parts + ([stmt.module] if stmt.module else []))
        else:
            base = stmt.module or ""
        # ``from pkg import sub`` loads the submodule; other names come from ``pkg`` itself
        subs = ["%s.%s" % (base, a.name) for a in stmt.names]
        out = [sub for sub in subs if sub in known]
        if len(out) < len(subs):
            out.append(base)
    return [t for t in out if t == PKG or t.startswith(PKG + ".")]


def _with_packages(importer: str, target: str, known: Set[str]) -> List[str]:
    """``target`` plus the packages its import runs first (not the root, not the importer's own)."""
    parts = target.split(".")
    found = [target]
    for i in range(2, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg in known and not (importer == pkg or importer.startswith(pkg + ".")):
            found.append(pkg)
    return found


def _graph(*, type_only: bool = True) -> Tuple[Dict[str, Set[str]], List[str]]:
    """(import edges between package modules, function-local imports found); with
    ``type_only=False`` the imports under ``if TYPE_CHECKING:`` are left out (what runs)."""
    mods = _modules()
    known = set(mods)
    edges: Dict[str, Set[str]] = {m: set() for m in mods}
    local: List[str] = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for stmt, in_function, for_types in _imports(tree):
            if for_types and not type_only:
                continue
            for target in _targets(mod, path.name == "__init__.py", stmt, known):
                if in_function:
                    local.append("%s:%d imports %s" % (mod, stmt.lineno, target))
                for t in _with_packages(mod, target, known):
                    if t in known and t != mod:
                        edges[mod].add(t)
    return edges, local


def _cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: List[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _path(edges: Dict[str, Set[str]], start: str, goal: str) -> Optional[List[str]]:
    seen = {start}
    todo = [[start]]
    while todo:
        trail = todo.pop(0)
        for nxt in sorted(edges.get(trail[-1], ())):
            if nxt == goal:
                return trail + [nxt]
            if nxt not in seen:
                seen.add(nxt)
                todo.append(trail + [nxt])
    return None


def test_the_graph_sees_the_known_layers() -> None:
    edges, _ = _graph()
    # a sanity check of the reader itself: these imports exist and must be seen
    assert "queen_sync.client" in edges["queen_sync"]
    assert "queen_sync.wire._base" in edges["queen_sync.wire.messages"]
    assert "queen_sync.wire" in edges["queen_sync.queues"]  # the package runs first
    assert "queen_sync.codec" in edges["queen_sync.wire._base"]


def test_the_reader_counts_type_checking_imports() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "import typing\n"
        "if TYPE_CHECKING:\n"
        "    from .a import A\n"
        "else:\n"
        "    from .b import B\n"
        "if typing.TYPE_CHECKING:\n"
        "    import queen_sync.c\n"
        "def f():\n"
        "    from . import d\n"
    )
    found = [
        (stmt.module if isinstance(stmt, ast.ImportFrom) else stmt.names[0].name, in_function, type_only)
        for stmt, in_function, type_only in _imports(tree)
    ]
    assert found == [
        ("typing", False, False),
        ("typing", False, False),
        ("a", False, True),
        ("b", False, False),
        ("queen_sync.c", False, True),
        (None, True, False),
    ]
    # and in the package: the session names the buffer manager for its types only
    assert "queen_sync.producer" in _graph()[0]["queen_sync._session"]
    assert "queen_sync.producer" not in _graph(type_only=False)[0]["queen_sync._session"]


def test_no_import_cycles() -> None:
    edges, _ = _graph()
    cycles = _cycles(edges)
    detail = []
    for comp in cycles:
        ring = _path({m: edges[m] & set(comp) for m in comp}, comp[0], comp[0])
        detail.append(" -> ".join(ring or comp))
        detail.extend("    %s -> %s" % (m, ", ".join(sorted(edges[m] & set(comp)))) for m in comp)
    assert not cycles, "import cycles:\n" + "\n".join(detail)


def test_no_function_local_imports_of_the_package() -> None:
    _, local = _graph()
    assert not local, "import these at module level (or under TYPE_CHECKING):\n" + "\n".join(local)


def test_only_the_front_door_and_integrations_import_the_client() -> None:
    edges, _ = _graph()
    offenders = [
        m
        for m, targets in sorted(edges.items())
        if "queen_sync.client" in targets and m not in CLIENT_IMPORTERS[:1] and not any(_under(m, p) for p in CLIENT_IMPORTERS[1:])
    ]
    assert not offenders, "modules importing queen_sync.client: %s" % offenders


def test_nothing_below_the_client_reaches_it() -> None:
    edges, _ = _graph()
    # any route to the client, not only a direct import (the front door and integrations aside)
    reach = [
        " -> ".join(p)
        for m in sorted(edges)
        if m != "queen_sync.client" and m != PKG and m not in ABOVE_THE_CLIENT
        and not _under(m, "queen_sync.contrib") and not _under(m, "queen_sync.testing")
        for p in [_path(edges, m, "queen_sync.client")]
        if p
    ]
    assert not reach, "modules that reach queen_sync.client:\n" + "\n".join(reach)


def test_embedded_broker_imports_nothing_of_the_client() -> None:
    edges, _ = _graph()
    outside = sorted(
        "%s -> %s" % (m, t)
        for m, targets in edges.items()
        if _under(m, "queen_sync.testing")
        for t in targets
        if not _under(t, "queen_sync.testing")
    )
    assert not outside, "the embedded broker imports client code: %s" % outside


_ORDINARY_CALLS = r"""
import sys
import queen_sync
from queen_sync.testing import EmbeddedBroker

before = {m for m in sys.modules if m == "queen_sync" or m.startswith("queen_sync.")}
with EmbeddedBroker() as broker, queen_sync.Queen(broker.url) as q:
    orders = q.queue("orders")
    orders.config({"lease_time": 30}).create()
    orders.update_config({"retry_limit": 2})
    orders.partition("p").push([{"data": 1}, {"data": 2}])
    orders.buffer(10, 50).push({"data": 3})
    q.flush_all_buffers()
    msgs = orders.group("g").batch(2).pop()
    q.renew(msgs[0])
    q.trace(msgs[0], "t", {"step": 1})
    q.ack(msgs, True)
    tx = q.transaction().queue("out").push({"data": 4})
    tx.ack(orders.group("g").pop(), "completed").commit()
    orders.group("c").limit(1).each().consume(lambda m: m.trace("seen", {"ok": True}))
    orders.dlq("g").get()
    q.admin.get_overview()
    q.admin.get_queue_detail("orders")
    q.admin.seek_consumer_group("g", "orders", to_end=True)
    q.delete_consumer_group("c")
    orders.delete()
after = {m for m in sys.modules if m == "queen_sync" or m.startswith("queen_sync.")}
print(sorted(after - before))
"""


def test_ordinary_calls_import_nothing_lazily() -> None:
    """After ``import queen_sync``, the ordinary calls load no further module of the package."""
    run = subprocess.run(
        [sys.executable, "-c", _ORDINARY_CALLS], capture_output=True, text=True, timeout=120, cwd=str(ROOT.parent)
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "[]", run.stdout
