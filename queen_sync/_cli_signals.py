"""The signal-handler scopes of the command line: install handlers for a block, put the
previous ones back after it.

Each command that treats SIGINT / SIGTERM its own way (``consume``'s graceful stop, ``push``
from stdin, SIGTERM of the other commands) subclasses :class:`HandlerScope` with its
``_on_signal``. Python lets only the main thread set handlers: elsewhere a scope does
nothing. Only the standard library is imported.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Dict, Sequence, TypeVar

__all__ = ["HandlerScope"]

_S = TypeVar("_S", bound="HandlerScope")


class HandlerScope:
    """A context manager: ``self._on_signal`` handles ``signals`` inside the ``with`` block
    (main thread only); the previous handlers are restored at its end, or earlier by
    :meth:`restore` (then a later signal acts as it did before the block)."""

    def __init__(self, signals: Sequence[int]) -> None:
        self._signals = tuple(signals)
        self._prev: Dict[int, Any] = {}

    def __enter__(self: _S) -> _S:
        if threading.current_thread() is threading.main_thread():
            for sig in self._signals:
                self._prev[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()

    def restore(self) -> None:
        """Put the handlers from before the block back (once; a no-op after that)."""
        for sig, prev in self._prev.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        self._prev.clear()

    def _on_signal(self, signum: int, frame: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError
