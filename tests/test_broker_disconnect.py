"""Embedded broker: a pop whose caller hung up must not lease messages to the dead connection;
plus the standalone ``python -m queen_sync.testing`` start-up errors."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from urllib.parse import urlsplit

from _broker_http import RawHTTP, unique, wait_until

from queen_sync.testing.__main__ import main as broker_main


def _raw_pop(url: str, queue: str, query: str) -> socket.socket:
    """Open a raw connection and send a pop GET without reading the answer."""
    u = urlsplit(url)
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    s.sendall(("GET /api/v1/pop/queue/%s?%s HTTP/1.1\r\nHost: %s\r\n\r\n"
               % (queue, query, u.netloc)).encode("ascii"))
    return s


def test_parked_pop_of_a_closed_connection_does_not_take_a_later_message(embedded_broker) -> None:
    http = RawHTTP(embedded_broker.url)
    q = unique("gone")
    http.configure(q)  # leaseTime 300 s: a message leased to the dead connection would be stuck
    s = _raw_pop(embedded_broker.url, q, "wait=true&timeout=10000")
    wait_until(lambda: embedded_broker.request_count("GET", "/api/v1/pop/") == 1)
    s.close()  # the caller gives up mid-poll (e.g. Ctrl-C)
    http.push(q, [{"n": 1}])
    got = http.pop(q, wait=True, timeout=5000)
    assert [m["data"] for m in got["messages"]] == [{"n": 1}]
    assert http.ack(got["messages"][0])["success"] is True


def test_lease_is_given_back_when_the_reply_cannot_be_delivered(embedded_broker) -> None:
    """The caller hangs up after the pop claimed its messages but before the reply is written."""
    http = RawHTTP(embedded_broker.url)
    q = unique("late")
    http.push(q, [{"n": 1}, {"n": 2}])
    state = embedded_broker.state
    original = state.pop
    entered, closed, claimed = threading.Event(), threading.Event(), threading.Event()

    def claim_after_close(queue, partition, params, disconnected=None):  # type: ignore[no-untyped-def]
        entered.set()
        assert closed.wait(10)
        reply = original(queue, partition, params, None)  # claims regardless of the connection
        claimed.set()
        return reply

    state.pop = claim_after_close  # type: ignore[method-assign]
    s = _raw_pop(embedded_broker.url, q, "batch=10")
    assert entered.wait(10)
    s.close()
    closed.set()
    assert claimed.wait(10)
    # the server thread notices the closed connection and releases the lease: a live long
    # poll (on the real pop again) gets both messages at once instead of waiting 300 s
    state.pop = original  # type: ignore[method-assign]
    got = http.pop(q, batch=10, wait=True, timeout=5000)
    assert [m["data"] for m in got["messages"]] == [{"n": 1}, {"n": 2}]
    assert not [lid for lid in state.leases if lid != got["leaseId"]]


def test_pop_checks_the_connection_before_claiming(embedded_broker) -> None:
    http = RawHTTP(embedded_broker.url)
    q = unique("pre")
    http.push(q, ["x"])
    status, body = embedded_broker.state.pop(q, None, {"wait": "true", "timeout": "5000"}, lambda: True)
    assert status == 200 and body["messages"] == []
    assert embedded_broker.state.leases == {}
    assert [m["data"] for m in http.pop(q)["messages"]] == ["x"]


def test_standalone_broker_port_in_use_is_a_one_line_error(capsys) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        assert broker_main(["--port", str(taken.getsockname()[1])]) == 2
    finally:
        taken.close()
    err = capsys.readouterr().err
    assert err.startswith("error: cannot listen on 127.0.0.1:") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_standalone_broker_port_out_of_range_exits_2() -> None:
    r = subprocess.run([sys.executable, "-m", "queen_sync.testing", "--port", "70000"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr == "error: --port 70000 is out of range (0-65535)\n"
    assert r.stdout == ""
