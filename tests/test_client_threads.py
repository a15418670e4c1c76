"""One Queen shared by many threads: every message arrives exactly once."""

from __future__ import annotations

import threading
from typing import Any, List, Set

from queen_sync import Queen

THREADS = 16
PER_THREAD = 500
CHUNK = 10  # push calls of 10 items (plus some single-item pushes)


def test_16_threads_share_one_client(broker_url: str, qname: str) -> None:
    errors: List[BaseException] = []
    start = threading.Barrier(THREADS)
    with Queen(broker_url, retry_delay_millis=10) as q:

        def producer(t: int) -> None:
            try:
                start.wait(10)
                ids = ["%d-%d" % (t, i) for i in range(PER_THREAD)]
                b = q.queue(qname).partition("t%d" % t)
                for i in range(0, 20):  # 20 single pushes
                    res = b.push({"data": {"id": ids[i]}})
                    assert res[0]["status"] == "queued"
                for i in range(20, PER_THREAD, CHUNK):
                    res = b.push([{"data": {"id": x}} for x in ids[i : i + CHUNK]])
                    assert [r["status"] for r in res] == ["queued"] * len(res)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=producer, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert not errors, errors[:3]

        seen: List[Any] = []
        total = THREADS * PER_THREAD
        empty = 0
        while len(seen) < total and empty < 3:
            got = q.queue(qname).batch(1000).partitions(THREADS).wait(True).timeout_millis(2000).pop()
            if not got:
                empty += 1
                continue
            seen.extend(m["data"]["id"] for m in got)
            q.ack(got)
        expected: Set[str] = {"%d-%d" % (t, i) for t in range(THREADS) for i in range(PER_THREAD)}
        assert len(seen) == total
        assert set(seen) == expected
        assert q.queue(qname).pop() == []
