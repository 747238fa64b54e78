"""RequestTiming: the client-side split of one request into upload, server and download."""

from __future__ import annotations

import pytest

from relay_ros.wire.request_timing import RequestTiming, server_seconds


def test_split_of_a_request_over_a_slow_uplink() -> None:
    # 450 kB at 20 Mbit/s (0.18 s) + 40 ms RTT, 80 ms on the server, 6 kB reply.
    timing = RequestTiming(
        bytes_sent=452_030,
        bytes_received=6_420,
        send_start=10.000,
        send_done=10.002,
        first_byte=10.300,
        reply_done=10.301,
        server_s=0.080,
    )
    assert timing.total_s == pytest.approx(0.301)
    assert timing.download_s == pytest.approx(0.001)
    assert timing.upload_s == pytest.approx(0.220)
    assert timing.split() == {
        "upload_s": pytest.approx(0.220),
        "server_s": 0.080,
        "download_s": pytest.approx(0.001),
        "total_s": pytest.approx(0.301),
    }


def test_without_server_timing_upload_is_everything_before_the_reply() -> None:
    timing = RequestTiming(10, 10, 0.0, 0.0, first_byte=0.2, reply_done=0.25)
    assert timing.server_s is None
    assert timing.upload_s == pytest.approx(0.2)
    # A server that reports more than the client saw (clock trouble) never gives < 0.
    assert RequestTiming(1, 1, 0.0, 0.0, 0.1, 0.1, server_s=0.5).upload_s == 0.0


@pytest.mark.parametrize(
    "timing, expected",
    [
        ({"infer_ms": 81.5}, 0.0815),
        ({"infer_ms": 3}, 0.003),
        ({}, None),
        (None, None),
        ({"infer_ms": "80"}, None),
        ({"infer_ms": True}, None),
        ({"infer_ms": float("nan")}, None),
        ({"infer_ms": -1.0}, None),
    ],
)
def test_server_seconds(timing, expected) -> None:
    assert server_seconds(timing) == (pytest.approx(expected) if expected else expected)


def test_policy_client_reports_the_split_over_an_emulated_link() -> None:
    """Through the wan link emulator: bytes match what crossed the link, and the
    upload of a raw request dominates while the server reports its simulated 50 ms."""
    import numpy as np

    from relay_ros import PolicyClient
    from relay_ros.server import ServerOptions, run_server_in_thread
    from relay_ros.sim.link import LinkThread

    with run_server_in_thread(ServerOptions(latency_ms=50.0)) as server:
        with LinkThread("wan", ("127.0.0.1", server.port), lifetime_s=60, seed=2) as link:
            with PolicyClient("pi05", url=link.proxied_url(server.url("pi05"))) as client:
                meta = client.get_server_metadata()
                height, width = meta["image_size"]
                obs = {
                    "images": {"base_0_rgb": np.zeros((height, width, 3), np.uint8)},
                    "state": np.zeros(meta["action_dim"], np.float32),
                    "prompt": "pick",
                }
                before = link.stats()
                reply = client.infer_reply(obs)
                after = link.stats()
                timing = reply.timing
    assert timing is not None
    assert timing.bytes_sent == after.bytes_up - before.bytes_up
    assert timing.bytes_received == after.bytes_down - before.bytes_down
    assert timing.bytes_sent > height * width * 3
    assert timing.send_start <= timing.send_done <= timing.first_byte <= timing.reply_done
    assert timing.server_s is not None and timing.server_s >= 0.05
    # 150 kB over 20 Mbit/s is 60 ms, plus a 30 ms (at least) round trip.
    assert timing.upload_s >= 0.08
    assert reply.roundtrip_s == timing.total_s
    assert reply.sent_at == timing.send_done
