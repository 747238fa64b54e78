"""The link emulator: bandwidth, delay, jitter, stalls and lifetime, through real sockets.

Bounds are generous on the slow side (a shared 2-core machine delays the proxy's
event loop) and strict on the fast side, where physics applies: bytes cannot
cross the emulated link faster than its bandwidth or its delay allow.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from helpers import wait_until

from relay_ros import PolicyClient
from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.sim.link import LinkThread, parse_host_port
from relay_ros.sim.link_profiles import PRESETS, LinkProfile, LinkProfileError, get_profile
from relay_ros.sim.link_proxy import LinkError

PI_CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")


@pytest.fixture(scope="module")
def echo_port() -> Iterator[int]:
    """A real TCP echo server on loopback, one thread per connection."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        conn.settimeout(30.0)
        with conn:
            try:
                while data := conn.recv(65536):
                    conn.sendall(data)
            except OSError:
                pass

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join(5.0)
        server.close()


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10.0)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def ping(sock: socket.socket) -> float:
    start = time.perf_counter()
    sock.sendall(b"p")
    assert sock.recv(16) == b"p"
    return time.perf_counter() - start


def test_presets_have_the_issue_numbers() -> None:
    wan = PRESETS["wan"]
    assert (wan.up_mbit_s, wan.down_mbit_s, wan.rtt_ms, 2 * wan.jitter_ms) == (20, 100, 40, 10)
    assert set(PRESETS) >= {"lan", "wan", "lte"}
    assert "RTT 40 ms +- 10 ms" in wan.describe()
    assert get_profile("lte").stall_every_s is not None


def test_bad_profiles_are_refused_with_the_value() -> None:
    with pytest.raises(LinkProfileError, match=r"link preset 'dsl' is unknown; expected one of"):
        get_profile("dsl")
    with pytest.raises(LinkProfileError, match=r"up_mbit_s is 0; expected > 0 or None"):
        LinkProfile("x", up_mbit_s=0, down_mbit_s=None, delay_ms=1.0)
    with pytest.raises(LinkProfileError, match=r"delay_ms is -1.0; expected a number >= 0"):
        LinkProfile("x", up_mbit_s=None, down_mbit_s=None, delay_ms=-1.0)
    with pytest.raises(LinkProfileError, match=r"stall_every_s 0.1 must be longer than stall_ms"):
        LinkProfile("x", None, None, 0.0, stall_every_s=0.1, stall_ms=200.0)
    with pytest.raises(LinkProfileError, match=r"jitter_ms is nan; expected a finite number"):
        get_profile("wan").with_overrides(jitter_ms=float("nan"))


def test_parse_host_port() -> None:
    assert parse_host_port("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_host_port("[::1]:8000") == ("::1", 8000)
    with pytest.raises(ValueError, match=r"'localhost' is not host:port"):
        parse_host_port("localhost")
    with pytest.raises(ValueError, match=r"port 70000 is outside 0..65535"):
        parse_host_port("h:70000")


def test_wan_round_trip_is_the_preset_rtt(echo_port: int) -> None:
    with LinkThread("wan", ("127.0.0.1", echo_port), lifetime_s=60, seed=3) as link:
        with connect(link.port) as sock:
            rtts = [ping(sock) for _ in range(25)]
    # 20 ms +- 5 ms each way: never below 30 ms; the median near 40 ms.
    assert min(rtts) >= 0.029, rtts
    assert 0.030 <= statistics.median(rtts) <= 0.150, rtts
    assert max(rtts) - min(rtts) > 0.002, "jitter should vary the round trip"


def test_wan_uplink_bandwidth(echo_port: int) -> None:
    size = 1_000_000
    with LinkThread("wan", ("127.0.0.1", echo_port), lifetime_s=60, seed=4) as link:
        with connect(link.port) as sock:
            start = time.perf_counter()
            sender = threading.Thread(target=sock.sendall, args=(b"u" * size,), daemon=True)
            sender.start()
            received = 0
            while received < size:
                chunk = sock.recv(65536)
                assert chunk, "the link closed early"
                received += len(chunk)
            elapsed = time.perf_counter() - start
            sender.join(5.0)
        stats = link.stats()
    # 20 Mbit/s = 2.5 MB/s: 1 MB needs at least 0.39 s (minus one burst) plus the delay.
    floor = (size - link.profile.burst_bytes) / 2.5e6 + 0.03
    assert floor <= elapsed <= 3.0, elapsed
    assert stats.bytes_up == size and stats.bytes_down == size
    assert stats.connections == 1


def test_byte_order_is_kept_under_jitter(echo_port: int) -> None:
    profile = LinkProfile("jittery", up_mbit_s=50.0, down_mbit_s=50.0, delay_ms=5.0, jitter_ms=5.0)
    payload = np.arange(300_000, dtype=np.uint32).tobytes()
    with LinkThread(profile, ("127.0.0.1", echo_port), lifetime_s=60, seed=5) as link:
        with connect(link.port) as sock:
            sender = threading.Thread(target=sock.sendall, args=(payload,), daemon=True)
            sender.start()
            got = bytearray()
            while len(got) < len(payload):
                chunk = sock.recv(65536)
                assert chunk
                got += chunk
            sender.join(5.0)
    assert bytes(got) == payload


def test_stalls_hold_the_data(echo_port: int) -> None:
    profile = LinkProfile("stally", None, None, 0.0, stall_every_s=0.5, stall_ms=200.0)
    with LinkThread(profile, ("127.0.0.1", echo_port), lifetime_s=60) as link:
        with connect(link.port) as sock:
            rtts = []
            start = time.monotonic()
            while time.monotonic() - start < 1.7:
                rtts.append(ping(sock))
                time.sleep(0.01)
        stats = link.stats()
    stalled = [r for r in rtts if r >= 0.1]
    assert stalled, f"no ping waited for a stall: max {max(rtts):.3f} s"
    assert max(rtts) <= 1.0
    assert stats.stalled_segments >= 1


def test_link_stops_by_itself(echo_port: int) -> None:
    link = LinkThread("lan", ("127.0.0.1", echo_port), lifetime_s=0.3).start()
    wait_until(lambda: not link.running(), 10.0, "the link ending after its lifetime")
    with pytest.raises(OSError):
        connect(link.port).recv(1)
    link.stop()  # idempotent after the lifetime


def test_start_errors_are_clear(echo_port: int) -> None:
    with LinkThread("lan", ("127.0.0.1", echo_port), lifetime_s=30) as link:
        with pytest.raises(LinkError, match=r"cannot listen on 127.0.0.1:\d+"):
            LinkThread("lan", ("127.0.0.1", echo_port), listen=("127.0.0.1", link.port)).start()
        with pytest.raises(LinkError, match=r"already started"):
            link.start()
    with pytest.raises(LinkError, match=r"lifetime_s is 0; expected a positive number"):
        LinkThread("lan", ("127.0.0.1", echo_port), lifetime_s=0)


def test_policy_client_over_wan_pays_for_raw_frames() -> None:
    """A raw π0.5 request (452 kB) over 20 Mbit/s takes at least 180 ms on the wire."""
    with run_server_in_thread(ServerOptions()) as server:
        with LinkThread("wan", ("127.0.0.1", server.port), lifetime_s=60, seed=6) as link:
            client = PolicyClient("pi05", url=link.proxied_url(server.url("pi05")))
            try:
                meta = client.get_server_metadata()
                height, width = meta["image_size"]
                rng = np.random.default_rng(0)
                obs = {
                    "images": {
                        k: rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
                        for k in PI_CAMERAS
                    },
                    "state": np.zeros(meta["action_dim"], np.float32),
                    "prompt": "pick",
                }
                times = []
                for _ in range(3):
                    reply = client.infer_reply(obs)
                    assert isinstance(reply.actions, np.ndarray)
                    assert reply.roundtrip_s is not None
                    times.append(reply.roundtrip_s)
            finally:
                client.close()
    wire_s = 3 * height * width * 3 * 8 / 20e6
    assert min(times) >= wire_s, times
    assert statistics.median(times) <= 2.0, times


def test_cli_forwards_and_stops_after_its_duration(echo_port: int) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "relay_ros.sim.link",
            "--preset",
            "lan",
            "--target",
            f"127.0.0.1:{echo_port}",
            "--duration",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        port = int(line.split()[2].rsplit(":", 1)[1])
        with connect(port) as sock:
            assert ping(sock) < 1.0
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_refuses_bad_arguments() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "relay_ros.sim.link", "--target", "nope"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "'nope' is not host:port" in result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "relay_ros.sim.link", "--target", "h:1", "--delay-ms", "-3"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "delay_ms is -3.0; expected a number >= 0" in result.stderr
