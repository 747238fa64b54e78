"""The reference server under hostile input: bounded decode, no stall of other
clients, no decompression bomb, no log amplification. Real sockets; the RSS test
runs the server as its own process so its peak memory can be read."""

from __future__ import annotations

import contextlib
import logging
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from helpers import pi_observation, scaled, wait_until
from websockets.sync.client import ClientConnection, connect

from relay_ros.formats.requests import MAX_JPEG_PIXELS, jpeg_size
from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.wire.codec import packb, unpackb

INTERNAL = {"type": "error", "message": "Internal inference error"}
PAYLOAD = {"type": "error", "message": "Invalid request payload"}
TIMEOUT = scaled(30.0)


def amplification_frame(mib: int) -> bytes:
    """``0xdd + n + 0x90*n``: n empty msgpack arrays in n + 5 bytes."""
    n = mib * 2**20 - 5
    return b"\xdd" + struct.pack(">I", n) + b"\x90" * n


def open_ws(url: str) -> tuple[ClientConnection, dict[str, Any]]:
    ws = connect(url, compression=None, max_size=None, open_timeout=TIMEOUT)
    ws.__enter__()
    return ws, unpackb(ws.recv(timeout=TIMEOUT))


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@contextlib.contextmanager
def server_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "relay_ros.server",
            *("--port", "0", "--port-file", str(port_file), "--model", "pi05"),
            *("--log-level", "WARNING"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def started() -> bool:
            assert proc.poll() is None, "server exited"
            return port_file.exists() and port_file.read_text().strip() != ""

        wait_until(started, 30, "the server writing its port file")
        yield proc, f"ws://127.0.0.1:{int(port_file.read_text())}/pi05"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_amplification_frame_stalls_no_one_and_keeps_rss_bounded(tmp_path: Path) -> None:
    """32 MiB of empty arrays used to cost the server +2.3 GB and block every client
    for 9.5 s. Now it is refused by the object limit, off the event loop."""
    frame = amplification_frame(32)
    with server_process(tmp_path) as (proc, url):
        victim, _ = open_ws(url)
        attacker, _ = open_ws(url)
        with victim, attacker:
            assert "actions" in _ask(victim, pi_observation())
            baseline = peak_rss_kib(proc.pid)
            replies: list[Any] = []
            sender = threading.Thread(target=lambda: replies.append(_ask(attacker, frame)))
            sender.start()
            worst = 0.0
            while sender.is_alive() or not worst:
                started = time.monotonic()
                assert "actions" in _ask(victim, pi_observation())
                worst = max(worst, time.monotonic() - started)
            sender.join(TIMEOUT)
            assert replies == [PAYLOAD]
            growth_mib = (peak_rss_kib(proc.pid) - baseline) / 1024
    # Generous bounds (shared machine): the frame is buffered a few times, never 75x.
    assert worst < 5.0
    assert growth_mib < 400, growth_mib


def _ask(ws: ClientConnection, frame: Any) -> Any:
    ws.send(frame if isinstance(frame, bytes) else packb(frame))
    return unpackb(ws.recv(timeout=TIMEOUT))


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with run_server_in_thread(ServerOptions(models=("pi05",))) as handle:
        yield handle.url("pi05")


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (b"\x91" * 40 + b"\xc0", "nests containers deeper"),  # nesting
        (b"\xdc\x00\x10" + b"\x90" * 10, "truncated"),
        (b"\xdd\xff\xff\xff\xff", "truncated"),  # declares 4 G items
        (b"\xdb\xff\xff\xff\xff", "truncated"),  # declares a 4 GiB string
    ],
    ids=["deep", "short-array", "4G-items", "4GiB-str"],
)
def test_hostile_headers_are_invalid_payload(
    server_url: str, frame: bytes, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    ws, _ = open_ws(server_url)
    with ws:
        assert _ask(ws, frame) == PAYLOAD
        assert "actions" in _ask(ws, pi_observation())
    assert why in caplog.text


def bomb_jpeg(height: int, width: int) -> bytes:
    """A tiny real JPEG whose frame header is patched to declare ``height x width``."""
    ok, encoded = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))
    assert ok
    data = bytearray(encoded.tobytes())
    size = jpeg_size(bytes(data))
    assert size == (8, 8)
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def test_jpeg_size_reads_the_frame_header() -> None:
    ok, encoded = cv2.imencode(".jpg", np.zeros((48, 64, 3), np.uint8))
    assert jpeg_size(encoded.tobytes()) == (48, 64)
    assert jpeg_size(b"\xff\xd8\xff\xd9") is None
    assert jpeg_size(b"\xff\xd8\x00\x00\x00") is None
    assert jpeg_size(bomb_jpeg(16000, 16000)) == (16000, 16000)


def test_jpeg_decompression_bomb_is_refused_undecoded(
    server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    bomb = bomb_jpeg(16000, 16000)
    assert len(bomb) < 1000
    ws, _ = open_ws(server_url)
    with ws:
        started = time.monotonic()
        assert _ask(ws, pi_observation(images={"base_0_rgb": bomb})) == INTERNAL
        assert time.monotonic() - started < 2.0  # decoding it took seconds
        assert "actions" in _ask(ws, pi_observation())
    assert f"declares 16000x16000 pixels; at most {MAX_JPEG_PIXELS}" in caplog.text


def test_a_jpeg_under_the_pixel_limit_is_still_decoded(server_url: str) -> None:
    ok, encoded = cv2.imencode(".jpg", np.zeros((224, 224, 3), np.uint8))
    ws, _ = open_ws(server_url)
    with ws:
        assert "actions" in _ask(ws, pi_observation(images={"base_0_rgb": encoded.tobytes()}))


@pytest.mark.parametrize("key", ["seed", "session_id", "prompt_type"])
def test_huge_client_values_make_short_log_lines(
    server_url: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="relay_ros")
    huge = "A" * (10 * 2**20)
    obs = pi_observation(**{"seed": huge} if key == "seed" else {})
    if key == "session_id":
        obs["session_id"] = 5
        obs["images"] = {huge[: 2**20]: np.zeros((4, 4, 3), np.uint8)}
    if key == "prompt_type":
        obs["sampling_params"] = {"lora": huge}
    ws, _ = open_ws(server_url)
    with ws:
        reply = _ask(ws, obs)
        assert reply.get("type") == "error"
    assert caplog.records
    assert max(len(record.getMessage()) for record in caplog.records) < 2000


def test_unknown_path_log_is_short(server_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="relay_ros")
    base = server_url.rsplit("/", 1)[0]
    with pytest.raises(Exception):  # noqa: B017, PT011 - InvalidStatus 404 (or a URI error)
        connect(f"{base}/{'x' * 6000}", open_timeout=TIMEOUT)
    assert all(len(record.getMessage()) < 1000 for record in caplog.records)
