"""Fork safety: what runs in a child process after a fork, and the uWSGI rules.

A forked child inherits every lock in the state it had at the fork, including locks held by
parent threads that do not exist in the child, and it has none of the parent's threads.
Every part of queen_sync that owns locks, threads or sockets (transport pools, push buffers,
consumers) therefore re-creates them in a child, by two independent means:

- :func:`after_fork_in_child` callbacks, run right after the fork by ``os.register_at_fork``
  and, under uWSGI, by its post-fork hook: uWSGI forks its workers from C **without**
  Python's at-fork hooks (unless started with ``--py-call-uwsgi-fork-hooks``), so
  ``os.register_at_fork`` callbacks never run there. The uWSGI hook is registered at import
  (in the process that loads the app, before it forks): through ``uwsgidecorators.postfork``
  when the app already imported ``uwsgidecorators``, else by chaining ``uwsgi.post_fork_hook``
  (keeping a hook set before). Callbacks run once per child, whichever hook fires first.
- a ``os.getpid()`` check on every entry of those objects (the fallback when no hook ran,
  e.g. a later import of ``uwsgidecorators`` replaced ``uwsgi.post_fork_hook``).

Neither can help a child whose **GIL** was held at the fork by a parent thread: under uWSGI
without Python's fork hooks, a worker forked while such a thread runs Python code blocks
forever before running any Python code (seen: both workers of a master that had just done
a buffered push at import). So in a uWSGI process that will fork workers
(:func:`uwsgi_prefork`: the master loading the app without ``--lazy-apps``), queen_sync
starts no background thread: the producer sends buffered pushes synchronously there.

:func:`warn_uwsgi_threads_off` tells when uWSGI runs Python without thread support (before
uWSGI 2.0.27, threads were off unless ``--enable-threads`` or ``--threads N`` was given;
since 2.0.27 they are always on and ``--enable-threads`` is a no-op): one WARNING on the
``queen_sync`` logger plus a :class:`RuntimeWarning`, because the package's ``NullHandler``
keeps a log record from reaching ``logging.lastResort`` when the application configured no
logging (``warnings`` go to stderr, i.e. the uWSGI log, by default).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import warnings
from typing import Any, Callable, List, Optional

__all__ = ["after_fork_in_child", "uwsgi_prefork", "warn_uwsgi_threads_off", "uwsgi_module"]

log = logging.getLogger("queen_sync")

_callbacks: List[Callable[[], None]] = []
_ran_for_pid = os.getpid()  # the process whose state is current (callbacks ran for it)


def uwsgi_module() -> Optional[Any]:
    """The embedded ``uwsgi`` module when running inside uWSGI, else None."""
    mod = sys.modules.get("uwsgi")
    if mod is not None:
        return mod
    try:
        # importable only inside uWSGI; by name, so no type checker looks for its stubs
        return importlib.import_module("uwsgi")
    except ImportError:
        return None


def _run_child_hooks() -> None:
    global _ran_for_pid
    pid = os.getpid()
    if pid == _ran_for_pid:  # the other hook ran already (or not a child)
        return
    _ran_for_pid = pid
    for cb in list(_callbacks):
        try:
            cb()
        except Exception:  # pragma: no cover - must never break a fork
            pass


def after_fork_in_child(callback: Callable[[], None]) -> None:
    """Run ``callback()`` in every child process right after a fork (``os.fork``,
    multiprocessing, gunicorn, uWSGI workers); exceptions are swallowed."""
    _callbacks.append(callback)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_run_child_hooks)


def _install_uwsgi_hook() -> None:
    uwsgi = uwsgi_module()
    if uwsgi is None:
        return
    deco = sys.modules.get("uwsgidecorators")  # never imported here: it replaces uwsgi.spooler
    if deco is not None and callable(getattr(deco, "postfork", None)):
        deco.postfork(_run_child_hooks)
        return
    previous = getattr(uwsgi, "post_fork_hook", None)

    def post_fork_hook() -> None:
        _run_child_hooks()
        if previous is not None:
            previous()

    uwsgi.post_fork_hook = post_fork_hook


_install_uwsgi_hook()

_prefork_pid = -1
_prefork = False


def uwsgi_prefork() -> bool:
    """True in a uWSGI process that forks workers without Python's fork hooks: the master
    (``uwsgi.worker_id() == 0``, not a mule) of a uWSGI not started with
    ``--py-call-uwsgi-fork-hooks``. No background thread may run there (module docstring).
    False outside uWSGI, in workers (so always with ``--lazy-apps``) and in mules."""
    global _prefork_pid, _prefork
    pid = os.getpid()
    if pid != _prefork_pid:
        _prefork = _uwsgi_prefork_now()
        _prefork_pid = pid
    return _prefork


def _uwsgi_prefork_now() -> bool:
    uwsgi = uwsgi_module()
    if uwsgi is None:
        return False
    try:
        if uwsgi.worker_id() != 0:
            return False
        mule_id = getattr(uwsgi, "mule_id", None)
        if mule_id is not None and mule_id() != 0:
            return False
        opt = getattr(uwsgi, "opt", None) or {}
        return not opt.get("py-call-uwsgi-fork-hooks")
    except Exception:  # pragma: no cover - an unexpected uwsgi module: assume the safe side
        return True


_warned = False
_warn_lock = threading.Lock()


def _uwsgi_threads_on(uwsgi: Any) -> bool:
    has = getattr(uwsgi, "has_threads", None)  # the truth after uWSGI's own option fix-ups
    if has is not None:
        return bool(has)
    opt = getattr(uwsgi, "opt", None) or {}
    on = opt.get("enable-threads") or opt.get("threads")
    if isinstance(on, bytes):
        return on not in (b"", b"0", b"false", b"no")
    return bool(on)


def warn_uwsgi_threads_off(what: str) -> bool:
    """Warn once per process (WARNING on the ``queen_sync`` logger and a RuntimeWarning) when
    this is a uWSGI process whose Python threads do not run between requests, naming
    ``what`` would not run. Returns True when it warned (now or before)."""
    global _warned
    uwsgi = uwsgi_module()
    if uwsgi is None:
        return False
    try:
        if _uwsgi_threads_on(uwsgi):
            return False
    except Exception:  # pragma: no cover
        return False
    with _warn_lock:
        if _warned:
            return True
        _warned = True
    version = getattr(uwsgi, "version", b"?")
    if isinstance(version, bytes):
        version = version.decode("ascii", "replace")
    msg = (
        "queen_sync: uWSGI %s runs Python without thread support (no --enable-threads / --threads): %s "
        "will only run while a request is being handled; start uWSGI with --enable-threads "
        "(uWSGI >= 2.0.27 always enables threads)" % (version, what)
    )
    log.warning("%s", msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)
    return True
