"""Checks of user callables, made when they are handed over (before anything runs).

The consumer calls its handler with one positional argument and its ``on_success`` /
``on_error`` callbacks with two; every stream operator calls its user function with a fixed
number (``key_by(fn(msg))``, ``reduce(fn(acc, value))``, ``gate(fn(value, ctx))``...). A
function that cannot take that many is refused here, naming who would call it, instead of
raising a TypeError at the first call (a consumer would nack every message of the queue
into its dead-letter queue; a stream would abandon every batch forever). A callable whose
signature cannot be read (some builtins and C types: ``str``, ``max``...) is accepted as it
is; then the call decides.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

from .errors import InvalidInputError

__all__ = ["check_callable", "check_arity", "two_arg"]


def check_callable(fn: Any, what: str) -> None:
    """Refuse a non-callable and a coroutine function (queen_sync never awaits).

    Raises:
        InvalidInputError: ``"<what> needs a callable, got ..."`` / ``"... coroutine ..."``.
    """
    if not callable(fn):
        raise InvalidInputError("%s needs a callable, got %r" % (what, fn))
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        raise InvalidInputError("%s: coroutine functions are not supported (queen_sync is blocking)" % what)


def _signature(fn: Callable[..., Any]) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin / C type without a readable signature
        return None


def _takes(sig: inspect.Signature, n: int) -> bool:
    try:
        sig.bind(*range(n))
    except TypeError:
        return False
    return True


def _describe(fn: Any, sig: inspect.Signature) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return "%s%s" % (name, sig)


def check_arity(fn: Any, n: int, what: str) -> Any:
    """Check that ``fn`` is a callable that can be called with ``n`` positional arguments
    and return it. Signatures that cannot be read are accepted.

    Raises:
        InvalidInputError: not callable, a coroutine function, or a signature that does not
            take ``n`` positional arguments (too few or too many parameters, a required
            keyword-only one), naming ``what`` and the signature.
    """
    check_callable(fn, what)
    sig = _signature(fn)
    if sig is not None and not _takes(sig, n):
        raise InvalidInputError(
            "%s needs a callable taking %d positional argument%s, got %s"
            % (what, n, "" if n == 1 else "s", _describe(fn, sig))
        )
    return fn


def two_arg(fn: Callable[..., Any], what: str) -> Callable[[Any, Any], Any]:
    """``fn`` as a two-argument callable: called ``fn(a, b)`` when it takes two positional
    arguments, else ``fn(a)`` when it takes one. Decided once from the signature (a TypeError
    raised inside ``fn`` is never mistaken for an arity mismatch); when the signature cannot
    be read, the official SDK's rule applies (``fn(a, b)``, and ``fn(a)`` after a TypeError).

    Raises:
        InvalidInputError: ``fn`` takes neither one nor two positional arguments.
    """
    check_callable(fn, what)
    sig = _signature(fn)
    if sig is None:

        def fallback(a: Any, b: Any) -> Any:
            try:
                return fn(a, b)
            except TypeError:
                return fn(a)

        return fallback
    if _takes(sig, 2):
        return fn
    if _takes(sig, 1):
        return lambda a, _b: fn(a)
    raise InvalidInputError("%s needs a callable taking 1 or 2 positional arguments, got %s" % (what, _describe(fn, sig)))
