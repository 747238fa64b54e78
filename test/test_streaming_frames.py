"""StreamingCore with CameraFrames: frames converted only for observations, JPEG on the
wire, bad frames refused without holding, the per-request latency split."""

from __future__ import annotations

import numpy as np
import pytest
from streaming_rig import CoreRig

from relay_ros.pipeline.camera_frames import FRAME_LOOKAHEAD_S, LAST_READ_LEAD_S
from relay_ros.pipeline.health import assess
from relay_ros.pipeline.image_encoding import decode_jpeg
from relay_ros.pipeline.observation_request import RequestTag
from relay_ros.wire.connection import InferOutcome
from relay_ros.wire.request_timing import RequestTiming


def connected_rig(**kwargs) -> CoreRig:
    rig = CoreRig(**kwargs)
    rig.connect()
    return rig


def test_frames_are_converted_per_request_not_per_frame() -> None:
    # The rig feeds every camera at the tick rate (100 Hz); requests go every 0.5 s.
    rig = connected_rig(overrides={"execute_horizon": 25})
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
    # A request every 0.2 s (no ramp-in stretching the first ones).
    rig = connected_rig(overrides={"execute_horizon": 10, "ramp_in_s": 0.0})
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


# ---------------------------------------------------------------- frames read on demand


def test_frames_are_read_only_just_before_a_request() -> None:
    # policy_node reads its cameras through read_frames: only from FRAME_LOOKAHEAD_S
    # before a request is due, never while a request is in flight.
    rig = connected_rig(on_demand=True, tick_s=0.001)
    rig.run(5.0)
    assert rig.core.counts["requests"] >= 9
    assert len(rig.chunks()) >= 8
    sent = rig.sent
    # (A read in the run's last window is before a request the run ended too early for.)
    for t in [t for t in rig.reads if t < rig.now - FRAME_LOOKAHEAD_S]:
        upcoming = [s for s in sent if s >= t - 1e-9]
        assert upcoming, f"frames read at {t} s and no request followed"
        assert upcoming[0] - t <= FRAME_LOOKAHEAD_S + 1e-6, (t, upcoming[0])
    # 100 ms of window at a 10 ms tick: about 11 reads per request, not 1000 a second.
    assert len(rig.reads) <= 12 * (len(sent) + 1)


def test_reading_frames_on_the_request_tick_counts_toward_request_to_wire() -> None:
    rig = connected_rig(on_demand=True, tick_s=0.001, read_cost_s=0.003)
    rig.run(2.0)
    to_wire = rig.core.pipeline_timing["request_to_wire"].values()
    processing = rig.core.pipeline_timing["frame_processing"].values()
    assert to_wire, "no request reached the wire"
    # Each request's tick read two cameras (3 ms each) before sending.
    assert min(to_wire) >= 2 * 0.003 - 1e-9
    assert min(processing) >= 0.003 - 1e-9  # a frame's processing includes its read
    # The frames read on the request's tick are the newest: their processing is in
    # request_to_wire already and is not added again to image_to_wire.
    image_to_wire = rig.core.pipeline_timing["image_to_wire"].values()
    assert image_to_wire == pytest.approx(to_wire)


def test_ticking_at_the_core_deadlines_publishes_what_a_fine_fixed_tick_does() -> None:
    # The node ticks when next_deadline says, after each event and at least every
    # 50 ms, instead of at tick_hz: the chunks must go out at the same times.
    fixed = connected_rig(tick_s=0.001, latency_s=0.123)
    adaptive = connected_rig(tick_s=0.001, latency_s=0.123, on_demand=True)
    fixed.run(6.0)
    adaptive.run(6.0)
    published_fixed = [(m.frame_id, m.points.stamp_sec_nanosec) for m in fixed.chunks()]
    published_adaptive = [(m.frame_id, m.points.stamp_sec_nanosec) for m in adaptive.chunks()]
    assert len(published_fixed) >= 10
    assert published_adaptive == published_fixed
    assert adaptive.core.stall_time(adaptive.now) == fixed.core.stall_time(fixed.now)
    # A tick per ms in the fixed rig; the adaptive one ticks a few dozen times a second.
    assert adaptive.ticks < 0.1 * fixed.ticks


def test_next_deadline_follows_the_scheduler() -> None:
    rig = connected_rig(
        on_demand=True, tick_s=0.001, latency_s=0.1, overrides={"execute_horizon": 25}
    )
    period = 1.0 / rig.config.tick_hz
    # First request: due at once, retried every tick period while it cannot go.
    assert rig.core.next_deadline(rig.now) == pytest.approx(rig.now + period)
    rig.step()
    assert rig.core.counts["requests"] == 1
    assert rig.core.next_deadline(rig.now) is None  # only the reply brings work
    rig.run_until(lambda: rig.chunks())
    # A chunk runs: the next deadline is the frame window before the next request.
    deadline = rig.core.next_deadline(rig.now)
    assert deadline is not None and deadline > rig.now + 0.1
    due = deadline + FRAME_LOOKAHEAD_S  # the next request
    # In the window: every tick period, then a last read just before the request,
    # then the request itself.
    now = due - FRAME_LOOKAHEAD_S
    assert rig.core.next_deadline(now) == pytest.approx(now + period)
    now = due - LAST_READ_LEAD_S - 0.5 * period
    assert rig.core.next_deadline(now) == pytest.approx(due - LAST_READ_LEAD_S)
    assert rig.core.next_deadline(due - LAST_READ_LEAD_S) == pytest.approx(due)
    rig.core.set_enabled(False, rig.now)
    assert rig.core.next_deadline(rig.now) is None
