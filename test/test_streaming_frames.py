"""StreamingCore with CameraFrames: frames converted only for observations, JPEG on the
wire, bad frames refused without holding, the per-request latency split."""

from __future__ import annotations

import numpy as np
import pytest
from streaming_rig import CoreRig

from relay_ros.pipeline.health import assess
from relay_ros.pipeline.image_encoding import decode_jpeg
from relay_ros.pipeline.streaming import RequestTag
from relay_ros.wire.connection import InferOutcome
from relay_ros.wire.request_timing import RequestTiming


def connected_rig(**kwargs) -> CoreRig:
    rig = CoreRig(**kwargs)
    rig.connect()
    return rig


def test_frames_are_converted_per_request_not_per_frame() -> None:
    # The rig feeds every camera at the tick rate (100 Hz); requests go every 0.5 s.
    rig = connected_rig()
    rig.run(3.0)
    counts = rig.core.counts
    conversions = rig.core.pipeline_timing["frame_processing"].count
    assert counts["frames_received"] >= 2 * 290
    assert counts["requests"] >= 4
    # A request's frames are converted once: on arrival just before it, or with it.
    assert conversions <= 4 * len(rig.camera_keys) * (counts["requests"] + 1)
    assert conversions < counts["frames_received"] / 10


def test_jpeg_frames_go_on_the_wire() -> None:
    rig = connected_rig(overrides={"image_encoding": "jpeg", "jpeg_quality": 80})
    rig.run_until(lambda: len(rig.observations) >= 2)
    images = rig.observations[-1]["images"]
    assert set(images) == set(rig.camera_keys)
    for data in images.values():
        assert isinstance(data, bytes)
        assert decode_jpeg(data).shape == (224, 224, 3)
    assert len(rig.chunks()) >= 1  # the ramp policy answers as usual


def test_a_frame_that_does_not_convert_is_refused_and_the_previous_one_used() -> None:
    rig = connected_rig(overrides={"execute_horizon": 10})  # a request every 0.2 s
    rig.run_until(lambda: len(rig.observations) >= 1)
    rig.cameras_on = False
    key = rig.camera_keys[0]
    refusals = rig.core.counts["refusals"]
    bad = np.zeros((10, 10), np.uint8)  # not (H, W, 3)
    for _ in range(40):  # bad frames for 0.4 s, a request falls into it
        rig.core.frame_arrived(key, bad, rig.now)
        for other in rig.camera_keys[1:]:
            rig.core.frame_arrived(other, np.zeros((224, 224, 3), np.uint8), rig.now)
        rig.step()
    assert rig.core.counts["refusals"] > refusals
    assert f"camera '{key}'" in (rig.core.last_refusal or "")
    assert "expected (H, W, 3) uint8" in (rig.core.last_refusal or "")
    # Not a hold by itself: the previous good frame stays until it is stale.
    assert rig.core.hold_reason is None
    rig.cameras_on = True
    rig.run(1.0)
    assert rig.core.hold_reason is None


def test_latency_split_from_the_reply_timing() -> None:
    rig = connected_rig()
    rig.run_until(lambda: rig.in_flight is not None)
    flight = rig.in_flight
    assert flight is not None and isinstance(flight.tag, RequestTag)
    rig.in_flight = None
    timing = RequestTiming(
        bytes_sent=41_000,
        bytes_received=6_500,
        send_start=1.000,
        send_done=1.001,
        first_byte=1.150,
        reply_done=1.152,
        server_s=0.082,
    )
    reply = rig.policy(flight.obs)  # type: ignore[misc]
    rig.core.result(
        InferOutcome(flight.tag, reply, 0.152, {"infer_ms": 82.0}, None, 1.001, timing), rig.now
    )
    network = rig.core.network_timing
    assert network["upload"].percentile(50) == pytest.approx(0.068)
    assert network["server"].percentile(50) == pytest.approx(0.082)
    assert network["download"].percentile(50) == pytest.approx(0.002)
    assert network["total"].percentile(50) == pytest.approx(0.152)
    assert network["request_bytes"].percentile(50) == 41_000
    values = assess(rig.core, rig.now, connected=True, connection_error=None).values
    assert values["upload_p50_ms"] == "68.0"
    assert values["server_p50_ms"] == "82.0"
    assert values["download_p50_ms"] == "2.0"
    assert values["total_p50_ms"] == "152.0"
    assert values["request_bytes_p50"] == "41000"
    assert values["image_encoding"] == "raw"
