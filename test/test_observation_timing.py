"""Fresher observations: the joint state sent with an observation shows the moment its
frames show, from the joint-state history at the frame's arrival ("frame"), or the
request goes when the frames arrive ("frame_arrival"); "request" is the old pairing
of the newest of each, kept for the paired benchmark. Synthetic clock: cameras at
15 Hz, joint states every 10 ms, an arm that follows what it is sent.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from streaming_rig import CoreRig, ramp_policy

from relay_ros.pipeline.observation_inputs import JUMP_QUARANTINE_S, ObservationInputs
from relay_ros.pipeline.request_clock import RequestClock
from relay_ros.pipeline.state import (
    HISTORY_LENGTH,
    JointStateCache,
    MissingJointsError,
    NonFiniteStateError,
    StaleInputError,
)
from relay_ros.pipeline.streaming import StreamingCore

CAMERA_PERIOD = 1.0 / 15.0
H = 50


# ------------------------------------------------------------------ the history


def test_the_state_at_an_earlier_time_is_interpolated_from_the_history() -> None:
    cache = JointStateCache(["a", "b"])
    for k in range(5):  # a moves 0.1 per 10 ms, b is published 5 ms later
        cache.update(["a"], [0.1 * k], 0.01 * k)
        cache.update(["b"], [-0.1 * k], 0.01 * k + 0.005)
    np.testing.assert_allclose(cache.vector_at(0.025, 0.045, 0.5), [0.25, -0.2])
    np.testing.assert_allclose(cache.vector_at(0.05, 0.05, 0.5), [0.4, -0.4])  # newest
    np.testing.assert_allclose(cache.vector_at(-1.0, 0.05, 0.5), [0.0, 0.0])  # oldest
    np.testing.assert_array_equal(cache.vector_at(0.05, 0.05, 0.5), cache.vector(0.05, 0.5))
    # The checks of vector() at now.
    with pytest.raises(StaleInputError, match="joint 'a' is stale"):
        cache.vector_at(0.0, 1.0, 0.5)
    cache.update(["a"], [float("nan")], 0.041)
    cache.update(["a"], [0.5], 0.042)
    with pytest.raises(NonFiniteStateError, match="'a': nan"):
        cache.vector_at(0.0405, 0.05, 0.5)
    with pytest.raises(MissingJointsError):
        JointStateCache(["c"]).vector_at(0.0, 0.0, 0.5)


def test_the_history_is_bounded() -> None:
    cache = JointStateCache(["a"])
    for k in range(HISTORY_LENGTH + 100):
        cache.update(["a"], [float(k)], k * 0.001)
    now = (HISTORY_LENGTH + 99) * 0.001
    assert cache.vector_at(0.0, now, 10.0)[0] == 100.0  # the oldest value kept


# ------------------------------------------------------------------ the core


class RecordingRig(CoreRig):
    """A CoreRig whose arm follows its trajectories, with its positions over time."""

    def __post_init__(self) -> None:
        self.positions: list[tuple[float, np.ndarray]] = []
        self.frame_times: list[float] = []
        self.requested: list[float] = []  # when each observation was submitted
        super().__post_init__()

    def _submit(self, obs: dict[str, Any], tag: Any) -> bool:
        accepted = super()._submit(obs, tag)
        if accepted:
            self.requested.append(self.now)
        return accepted

    def step(self) -> None:
        before = self._next_frame
        super().step()
        self.positions.append((self.now, self.state.copy()))
        if self._next_frame != before:
            self.frame_times.append(self.now)

    def arm_at(self, t: float) -> np.ndarray:
        times = np.array([p[0] for p in self.positions])
        index = int(np.argmin(np.abs(times - t)))
        assert abs(times[index] - t) < 1e-9, f"no arm position recorded at {t}"
        return self.positions[index][1]


def moving_rig(timing: str) -> RecordingRig:
    rig = RecordingRig(
        policy=_moving(),
        follow=True,
        camera_period_s=CAMERA_PERIOD,
        observation_timing=timing,
        overrides={"execute_horizon": 10, "request_lead_s": 0.1},
    )
    rig.connect()
    rig.run_until(lambda: len(rig.observations) >= 8)
    return rig


def _moving() -> Any:
    ramp = ramp_policy(H, 0.01)  # 0.5 rad/s on every joint

    def infer(obs: dict[str, Any]) -> np.ndarray:
        plan = np.asarray(ramp(obs), dtype=np.float32)
        plan[:, 6:] = plan[:1, 6:]  # the gripper stands
        return plan

    return infer


def _sent_state(obs: dict[str, Any]) -> np.ndarray:
    return np.asarray(obs["state"], dtype=np.float64).reshape(-1)[:7]


def test_frame_timing_sends_the_state_at_the_newest_frame() -> None:
    rig = moving_rig("frame")
    for obs, t_obs in zip(rig.observations[2:], rig.sent[2:]):
        newest = max(t for t in rig.frame_times if t <= t_obs + 1e-9)
        assert t_obs == pytest.approx(newest)  # the observation's time is its frames'
        np.testing.assert_allclose(_sent_state(obs), rig.arm_at(newest), atol=1e-6)
    # The chunks are timed from there: the controller still got no jump.
    assert rig.core.counts["refusals"] == 0
    # The request goes one lead (0.1 s) before the switch: the frames' age is not
    # latency the lead must cover.
    dt, execute = 0.02, 10
    for chunk, requested in zip(rig.chunks()[2:5], rig.requested[3:6]):
        switch = chunk.points.stamp + chunk.points.time_from_start[0] + (execute - 1) * dt
        assert switch - requested == pytest.approx(0.1, abs=rig.tick_s + 1e-9)
    assert rig.core.latency.percentile(100) > 0.05  # the reported one includes it


def test_request_timing_pairs_older_frames_with_the_newest_state() -> None:
    rig = moving_rig("request")
    ages = []
    for obs, t_obs in zip(rig.observations[2:], rig.sent[2:]):
        np.testing.assert_allclose(_sent_state(obs), rig.arm_at(t_obs), atol=1e-6)
        ages.append(t_obs - max(t for t in rig.frame_times if t <= t_obs + 1e-9))
    # The arm had moved on since the frames (by up to a camera period).
    assert max(ages) > 0.02


def test_frame_arrival_timing_sends_fresh_frames_and_state() -> None:
    rig = moving_rig("frame_arrival")
    for obs, t_obs in zip(rig.observations[2:], rig.sent[2:]):
        newest = max(t for t in rig.frame_times if t <= t_obs + 1e-9)
        assert t_obs - newest <= rig.tick_s + 1e-9  # sent on the tick its frames came
        np.testing.assert_allclose(_sent_state(obs), rig.arm_at(t_obs), atol=1e-6)
    assert rig.core.counts["refusals"] == 0
    assert rig.core.stall_time(rig.now) == pytest.approx(0.0, abs=1e-9)


def test_an_unknown_timing_is_refused() -> None:
    rig = CoreRig()
    with pytest.raises(ValueError, match="observation_timing 'late' is not one of"):
        StreamingCore(
            rig.config,
            camera_keys=rig.camera_keys,
            submit=lambda obs, tag: False,
            publish=lambda msg: None,
            request_reset=lambda: None,
            log=rig.log,
            observation_timing="late",  # type: ignore[arg-type]
        )


def test_after_a_clock_jump_joint_states_stamped_before_it_are_dropped() -> None:
    """A simulator that skipped 100 s ahead moved the arm; joint states it published
    before the jump can still be queued, and on the new clock their reception times
    look fresh. For a while after the jump, one stamped nearer the old time than the
    new one is dropped; stamps on the new clock, and zero stamps, are taken."""
    refused: list[str] = []
    inputs = ObservationInputs(
        [], ["j1"], clock=RequestClock(lambda: 0.0), refused=lambda r, _: refused.append(r)
    )
    inputs.joint_state(["j1"], [0.1], 10.0, 10.0)
    inputs.clear(jump=(10.0, 110.0))
    inputs.joint_state(["j1"], [0.2], 110.01, 10.005)  # published before the jump
    assert inputs.measured(110.01, 0.5, ["j1"]) is None
    inputs.joint_state(["j1"], [0.3], 110.02, 110.015)  # on the new clock
    assert inputs.measured(110.02, 0.5, ["j1"]).tolist() == [0.3]
    inputs.joint_state(["j1"], [0.4], 110.03, 0.0)  # no stamp: cannot tell, taken
    assert inputs.measured(110.03, 0.5, ["j1"]).tolist() == [0.4]
    later = 110.0 + JUMP_QUARANTINE_S
    inputs.joint_state(["j1"], [0.5], later, 10.5)  # the quarantine is over
    assert inputs.measured(later, 0.5, ["j1"]).tolist() == [0.5]
    assert refused == []
