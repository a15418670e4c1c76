"""Signals: SIGTERM / SIGINT as a graceful stop, with ``handle_signals=True``.

While the consumer runs, the first SIGTERM or SIGINT only sets :attr:`SignalHook.flag` (the
supervisor, ``_stopping``, turns it into a stop with reason ``"signal"``). A second signal,
or any signal once the consumer is stopping (for any reason) or done, or in a forked child,
goes to the previous handler: a stale handler must never swallow Ctrl-C. The previous
handlers are restored when the consumer ends. Main thread only (Python signal rules).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable, Dict, Optional

from ..errors import InvalidInputError

__all__ = ["SignalHook"]


class SignalHook:
    """The SIGTERM / SIGINT handlers of one consumer.

    Args:
        enabled: ``handle_signals``; when False :meth:`install` does nothing.
        takes: called in the signal handler (no lock may be taken there): True while the
            consumer runs and should take a signal (not stopping, not done, not a forked
            child's copy).
    """

    def __init__(self, enabled: bool, takes: Callable[[], bool]) -> None:
        self._enabled = enabled
        self._takes = takes
        self._prev: Dict[int, Any] = {}
        self._installed = False
        #: the signal number the running consumer took, else None
        self.flag: Optional[int] = None

    def install(self) -> None:
        """Install the handlers (a no-op unless enabled, or when installed already).

        Raises:
            InvalidInputError: outside the main thread (Python signal rules).
        """
        if not self._enabled or self._installed:
            return
        if threading.current_thread() is not threading.main_thread():
            raise InvalidInputError("handle_signals=True works only in the main thread (Python signal rules)")
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._prev[sig] = signal.signal(sig, self._on_signal)
        self._installed = True

    def restore(self) -> None:
        """Put the previous handlers back (only the main thread can; elsewhere a no-op)."""
        if not self._installed or threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in self._prev.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        self._installed = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Runs in the main thread between bytecodes: take no lock here, only set a flag.
        # In a forked child nobody reads the flag: behave like the previous handler.
        # Only a running consumer takes the signal; once it is stopping (for any reason) or
        # done, the previous behaviour applies (a stale handler must never swallow Ctrl-C).
        if self.flag is None and self._takes():
            self.flag = signum
            return
        prev = self._prev.get(signum)  # a second signal: the previous behaviour
        if callable(prev):
            prev(signum, frame)
        elif prev == signal.SIG_DFL or prev is None:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

