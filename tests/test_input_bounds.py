"""Bad input found by a newcomer review: refused before anything is sent, with a clear error."""

from __future__ import annotations

from typing import Any

import pytest

from queen_sync import InvalidInputError, Queen


async def _async_handler(msg: Any) -> None:  # pragma: no cover - must never be called
    raise RuntimeError("never")


class _AsyncCallable:
    async def __call__(self, msg: Any) -> None:  # pragma: no cover
        raise RuntimeError("never")


@pytest.mark.parametrize("handler", [_async_handler, _AsyncCallable()])
def test_async_handler_is_refused_and_nothing_is_consumed(queen: Any, queen_queue: str, handler: Any) -> None:
    queen.queue(queen_queue).push({"data": 1})
    with pytest.raises(InvalidInputError, match="async"):
        queen.queue(queen_queue).group("g").limit(1).consume(handler)
    with pytest.raises(InvalidInputError, match="async"):
        queen.queue(queen_queue).group("g").consume(handler, background=True)
    assert [m["data"] for m in queen.queue(queen_queue).group("g").batch(5).pop()] == [1]


@pytest.mark.parametrize(
    "make",
    [
        lambda url: Queen(url, timeout_millis=10**15),
        lambda url: Queen(url, connect_timeout_millis=10**20),
        lambda url: Queen(url, push_retry_timeout_millis=10**15),
        lambda url: Queen(url).queue("q").wait(True).timeout_millis(10**15),
        lambda url: Queen(url).queue("q").buffer(10, 10**20),
        lambda url: Queen(url).queue("q").idle_millis(10**15),
        lambda url: Queen(url).flush_all_buffers(10**15),
    ],
)
def test_durations_beyond_a_year_are_refused(make: Any) -> None:
    with pytest.raises(InvalidInputError, match="<= 31536000000"):
        make("http://127.0.0.1:1")


def test_queue_options_twice_or_beyond_32_bits_are_refused(queen: Any, queen_queue: str) -> None:
    with pytest.raises(InvalidInputError, match="twice"):
        queen.queue(queen_queue).config({"leaseTime": 30, "lease_time": 40}).create()
    with pytest.raises(InvalidInputError, match="lease_time"):
        queen.queue(queen_queue).config({"lease_time": 2**40}).create()
    # nothing was sent: the queue was never configured
    assert queen_queue not in [row["name"] for row in queen.admin.list_queues()["queues"]]


def test_lease_extension_beyond_32_bits_is_refused_before_sending(queen: Any, queen_queue: str) -> None:
    # the broker counts the seconds in a PostgreSQL integer: 2147483647 is the most it takes
    queen.queue(queen_queue).push({"data": 1})
    msg = queen.queue(queen_queue).group("g").batch(1).wait(True).timeout_millis(2000).pop()[0]
    for renew in (
        lambda: queen.renew(msg, seconds=2**31),
        lambda: queen.renew([msg["leaseId"]], seconds=10**12),
        lambda: msg.renew(2**31),
    ):
        with pytest.raises(InvalidInputError, match="2147483647"):
            renew()
    top = queen.renew(msg, seconds=2**31 - 1)
    assert top["success"] is True and top["expiresAt"] > "2090"  # about 68 years from now
    queen.ack(msg, True)
    # nothing reaches a broker that is not there: the bound is checked first
    with Queen("http://127.0.0.1:1", retry_attempts=1) as offline:
        with pytest.raises(InvalidInputError, match="2147483647"):
            offline.renew("a-lease", seconds=2**31)


def test_consumer_lease_renewals_at_the_longest_interval_stay_within_32_bits() -> None:
    # renew_lease(True, interval) asks for 3 x interval: at the longest interval taken (a year)
    # that is 94608000 seconds, which the broker's bound allows
    from queen_sync.consumer._leases import Renewer, renew_interval

    longest = renew_interval(True, 365 * 24 * 3600 * 1000, 10_000)
    assert longest == 31_536_000_000
    with pytest.raises(InvalidInputError):
        renew_interval(True, longest + 1, 10_000)
    renewer = Renewer(None, None, longest, True)  # type: ignore[arg-type]
    assert renewer.seconds == 94_608_000 <= 2**31 - 1
