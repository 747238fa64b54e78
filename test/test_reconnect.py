"""Reconnecting after the server went away (relay_ros/wire/reconnect.py): the backoff,
the TCP probe that ends a wait once a closed port opens again, and that the probe
never hammers a server whose port is open. Real sockets and servers on loopback."""

from __future__ import annotations

import contextlib
import errno
import queue
import random
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from fault_server import FaultServer
from helpers import free_port, wait_until

from relay_ros.server import ServerHandle, ServerOptions, run_server_in_thread
from relay_ros.wire.connection import InferOutcome, PolicyConnection
from relay_ros.wire.deadline import Deadline
from relay_ros.wire.reconnect import Backoff, RetryWait, WaitEnd, port_closed
from relay_ros.wire.tcp import connect, refused_by, resolve

# A backoff far longer than any wait below: a test that connects within it shows the
# probe ended the wait, however slow the machine.
LONG_BACKOFF_S = 120.0
# How long a reconnect may take before a test gives up (scaled by wait_until).
WAIT_S = 20.0


# No WALLE_* from the shell or a .env above the checkout (test/conftest.py).
pytestmark = pytest.mark.usefixtures("isolated_env")


@contextlib.contextmanager
def serving(port: int) -> Iterator[ServerHandle]:
    with run_server_in_thread(ServerOptions(models=("pi05",), port=port)) as handle:
        yield handle


def connection(
    port: int, on_result: Callable[[InferOutcome], None] = lambda _: None, **options: Any
) -> PolicyConnection:
    return PolicyConnection(
        "pi05", url=f"ws://127.0.0.1:{port}/{{model}}", on_result=on_result, **options
    )


OBS = {
    "images": {"base_0_rgb": np.zeros((8, 8, 3), np.uint8)},
    "state": np.zeros(32, np.float32),
    "prompt": "wave",
}


# --- PolicyConnection ------------------------------------------------------------------


def test_a_server_that_comes_up_during_a_long_backoff_is_connected_at_once() -> None:
    port = free_port()
    conn = connection(port, reconnect_initial_s=LONG_BACKOFF_S, reconnect_max_s=LONG_BACKOFF_S)
    try:
        assert wait_until(lambda: conn.last_error is not None, WAIT_S)
        assert conn.last_error is not None and conn.last_error.startswith("ConnectionRefused")
        assert wait_until(lambda: conn.probes >= 2, WAIT_S)  # it probes while it waits
        with serving(port):
            assert wait_until(lambda: conn.connected, WAIT_S)
            assert conn.connect_attempts == 2  # the refused one, then the one that worked
    finally:
        conn.close()


def test_a_server_restarted_on_its_port_is_reconnected_within_a_long_backoff() -> None:
    """Connected, the server stops, the reconnect attempt is refused and a long backoff
    starts; the server comes back on the same port: connected again, requests work."""
    port = free_port()
    results: queue.Queue[InferOutcome] = queue.Queue()
    conn = connection(
        port, results.put, reconnect_initial_s=LONG_BACKOFF_S, reconnect_max_s=LONG_BACKOFF_S
    )
    try:
        with serving(port):
            assert wait_until(lambda: conn.connected, WAIT_S)
        # Refused, now in its long wait (probing): the attempts stay as they are.
        assert wait_until(lambda: not conn.connected and conn.probes >= 2, WAIT_S)
        attempts = conn.connect_attempts
        with serving(port) as again:
            assert wait_until(lambda: conn.connected, WAIT_S)
            assert conn.connect_attempts == attempts + 1
            assert again.stats.connections_opened == 1  # probes are not WebSocket connections
            assert conn.submit(OBS, "after")
            outcome = results.get(timeout=20)
            assert outcome.tag == "after" and isinstance(outcome.reply, np.ndarray)
    finally:
        conn.close()


class UpgradeRefusingServer:
    """A TCP server that answers every HTTP request with 503, as a proxy does whose
    backend is down; counts the connections that sent a request (full attempts) and
    those that closed without one (probes)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # accept() notices the stop flag
        self._stopped = threading.Event()
        self.port = int(self._listener.getsockname()[1])
        self.requests = 0
        self.silent = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> UpgradeRefusingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._thread.join(5)
        self._listener.close()

    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            with sock:
                sock.settimeout(5)
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                with self._lock:
                    if data:
                        self.requests += 1
                    else:
                        self.silent += 1
                if data:
                    sock.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")


def test_probes_never_hammer_a_port_that_accepts_connections() -> None:
    """The port is open but every attempt fails (HTTP 503): at most one probe per wait,
    the backoff alone paces the attempts."""
    with UpgradeRefusingServer() as server:
        conn = connection(server.port, reconnect_initial_s=0.2, reconnect_max_s=0.2)
        try:
            assert wait_until(lambda: server.requests >= 5, WAIT_S)
        finally:
            conn.close()
        assert conn.last_error is not None and "503" in conn.last_error
        assert server.silent <= server.requests
        assert conn.probes <= conn.connect_attempts


def test_a_refused_direct_route_behind_an_open_proxy_port_is_no_shortcut() -> None:
    """The proxy answers with a direct route to a port where nothing listens: every
    attempt is refused there while the probed (proxy) port stays open. Each wait must
    run its course; were the refusal taken as "the port was closed", the open proxy
    port would end every wait at its first probe and attempts would come at the probe
    rate."""
    with FaultServer() as proxy:
        proxy.metadata = {**proxy.metadata, "direct_url": f"ws://127.0.0.1:{free_port()}/pi05"}
        conn = connection(proxy.port, reconnect_initial_s=0.2, reconnect_max_s=0.2)
        try:
            assert wait_until(lambda: conn.connect_attempts >= 3)
            assert conn.reconnect_shortcuts == 0
            assert conn.probes <= conn.connect_attempts  # one probe a wait, then it sleeps
            assert conn.last_error is not None and "ConnectionRefused" in conn.last_error
        finally:
            conn.close()


# --- RetryWait ---------------------------------------------------------------------------


def test_a_wait_on_a_closed_port_probes_at_a_bounded_rate() -> None:
    port = free_port()
    wait = RetryWait("127.0.0.1", port, threading.Event(), probe_s=0.05)
    assert wait.wait(0.3) == WaitEnd.ELAPSED
    # Each probe interval is at least 0.05 * (1 - 0.2) s: a slow machine probes less.
    assert 1 <= wait.probes <= int(0.3 / 0.04) + 1


def test_a_port_that_opens_during_the_wait_ends_it() -> None:
    port = free_port()
    wait = RetryWait("127.0.0.1", port, threading.Event(), probe_s=0.05)
    ended: list[str] = []
    thread = threading.Thread(target=lambda: ended.append(wait.wait(LONG_BACKOFF_S)))
    thread.start()
    assert wait_until(lambda: wait.probes >= 2, WAIT_S)  # the first one is done: seen closed
    with socket.create_server(("127.0.0.1", port)):
        thread.join(20)
    assert ended == [WaitEnd.REACHABLE]


def _refusal(port: int) -> OSError:
    """The error of a real TCP connect to 127.0.0.1:``port``, where nothing listens."""
    stop = threading.Event()
    addresses = resolve("127.0.0.1", port, Deadline(5.0), stop, "test")
    with pytest.raises(ConnectionRefusedError) as refused:
        connect(addresses, "127.0.0.1", port, Deadline(5.0), stop, "test")
    return refused.value


def test_a_server_back_before_the_first_probe_ends_the_wait_after_its_own_refusal() -> None:
    """The attempt was refused by this port and the server came up before the wait's
    first probe (a loaded machine can put a restart between the two): the refusal
    counts as the port seen closed, so the first probe that connects ends the wait."""
    port = free_port()
    refusal = _refusal(port)
    assert refused_by(refusal) == ("127.0.0.1", port)
    wait = RetryWait("127.0.0.1", port, threading.Event(), probe_s=0.05)
    with socket.create_server(("127.0.0.1", port)):
        assert wait.wait(LONG_BACKOFF_S, failure=refusal) == WaitEnd.REACHABLE
    assert (wait.probes, wait.shortcuts) == (1, 1)


def test_a_refusal_by_another_port_is_no_shortcut_when_this_one_is_open() -> None:
    refusal = _refusal(free_port())  # a direct route elsewhere refused the attempt
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = int(listener.getsockname()[1])
        wait = RetryWait("127.0.0.1", port, threading.Event(), probe_s=0.05)
        assert wait.wait(0.3, failure=refusal) == WaitEnd.ELAPSED
        assert wait.probes == 1


def test_a_port_open_from_the_first_probe_on_waits_the_whole_delay_with_one_probe() -> None:
    """Open all along (a proxy in front of a backend that is down, or a direct route
    that failed elsewhere): nothing to learn, no shortcut, no more probes."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = int(listener.getsockname()[1])
        wait = RetryWait("127.0.0.1", port, threading.Event(), probe_s=0.05)
        assert wait.wait(0.3) == WaitEnd.ELAPSED
        assert wait.probes == 1


def test_stop_ends_a_wait_at_once() -> None:
    stop = threading.Event()
    wait = RetryWait("127.0.0.1", free_port(), stop, probe_s=0.05)
    ended: list[str] = []
    thread = threading.Thread(target=lambda: ended.append(wait.wait(LONG_BACKOFF_S)))
    thread.start()
    assert wait_until(lambda: wait.probes >= 1, WAIT_S)
    stop.set()
    thread.join(10)
    assert ended == [WaitEnd.STOPPED]


def test_no_probes_when_probing_is_off() -> None:
    wait = RetryWait("127.0.0.1", free_port(), threading.Event(), probe_s=None)
    assert wait.wait(0.05) == WaitEnd.ELAPSED
    assert wait.probes == 0 and not wait.probing


def test_a_name_that_does_not_resolve_waits_without_probes() -> None:
    wait = RetryWait("no-such-host.invalid", 8000, threading.Event(), probe_s=0.05)
    assert wait.wait(0.2) == WaitEnd.ELAPSED
    assert wait.probes == 0


@pytest.mark.parametrize("value", [0, -0.1])
def test_probe_interval_must_be_positive(value: float) -> None:
    with pytest.raises(ValueError, match=rf"reconnect_probe_s={value!r} must be a positive"):
        RetryWait("127.0.0.1", 1, threading.Event(), probe_s=value)


# --- Backoff and port_closed -------------------------------------------------------------


def test_backoff_doubles_to_its_cap_and_starts_over_after_a_connection() -> None:
    backoff = Backoff(0.25, 5.0, 2.0, jitter=0.0)
    assert [backoff.next() for _ in range(7)] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.next() == 0.25


def test_backoff_jitter_only_shortens_a_wait() -> None:
    backoff = Backoff(1.0, 1.0, 2.0, jitter=0.2, rng=random.Random(3))
    delays = [backoff.next() for _ in range(200)]
    assert all(0.8 <= d <= 1.0 for d in delays)
    assert max(delays) - min(delays) > 0.1  # they do differ


@pytest.mark.parametrize(
    ("initial", "maximum", "factor", "message"),
    [
        (0, 1.0, 2.0, "reconnect_initial_s=0 must be a positive number of seconds"),
        (0.5, -1.0, 2.0, "reconnect_max_s=-1.0 must be a positive number of seconds"),
        (0.5, 1.0, 0.5, "reconnect_factor=0.5 must be >= 1"),
    ],
)
def test_backoff_settings_are_checked(
    initial: float, maximum: float, factor: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Backoff(initial, maximum, factor)


def test_port_closed_means_refused_or_unreachable_only() -> None:
    assert port_closed(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert port_closed(OSError(errno.EHOSTUNREACH, "no route"))
    assert not port_closed(TimeoutError(errno.ETIMEDOUT, "timed out"))
    assert not port_closed(ConnectionResetError(errno.ECONNRESET, "reset"))
    assert not port_closed(RuntimeError("other"))
