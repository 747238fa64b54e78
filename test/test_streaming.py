"""StreamingCore on a synthetic clock: what policy_node requests, publishes and refuses.

Each test drives the core the way the node does (frames, joint states, timer ticks,
replies after a latency) with time passed in, so timelines are exact and nothing
sleeps. test_policy_node.py keeps a few of these end to end on real rclpy.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from streaming_rig import CoreRig, ramp_policy

from relay_ros.pipeline.health import Level, assess
from relay_ros.pipeline.observation_request import RequestTag
from relay_ros.pipeline.settings import StreamingConfigError
from relay_ros.pipeline.streaming import ENABLE_STOP
from relay_ros.pipeline.trajectory import parse_t_obs
from relay_ros.wire.connection import InferOutcome

DT = 1.0 / 50.0  # reference pi05 control_hz
H = 50


def first_time(msg) -> float:
    return msg.points.stamp + float(msg.points.time_from_start[0])


def streaming_rig(**kwargs) -> CoreRig:
    rig = CoreRig(**kwargs)
    rig.connect()
    return rig


#: The timeline without the gentle start, for tests of its spacing and switches
#: (test_ramp_in.py tests the ramp-in).
NO_RAMP = {"ramp_in_s": 0.0}


# ------------------------------------------------------------------ streaming


def test_chunks_go_to_each_controller_with_timing_and_velocities() -> None:
    rig = streaming_rig(overrides=NO_RAMP)
    rig.run_until(lambda: len(rig.chunks()) >= 3)
    arm, gripper, preview = rig.chunks("arm"), rig.chunks("gripper"), rig.chunks(None)
    for msg in arm[:3]:
        assert msg.joint_names == ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6")
        tfs = msg.points.time_from_start
        np.testing.assert_allclose(np.diff(tfs), DT, atol=1e-9)
        assert tfs[0] >= DT - 1e-9  # first point at least one period ahead
        assert (msg.points.velocities[-1] == 0.0).all() and msg.points.velocities[0].any()
        assert msg.points.stamp > parse_t_obs(msg.frame_id)
    assert gripper[0].joint_names == ("gripper_joint",)
    assert len(preview[0].joint_names) == 7 and preview[0].joint_names[-1] == "gripper_joint"
    health = rig.health()
    assert (health.level, health.message) == (Level.OK, "streaming")
    assert float(health.values["latency_p50_ms"]) == pytest.approx(50.0)
    assert rig.core.counts["chunks_published"] == 3


def test_first_chunk_joins_the_still_arm_then_stale_actions_are_dropped() -> None:
    # No smoothing: the published rows are the chunk's own.
    rig = streaming_rig(latency_s=0.15, follow=False, overrides={"smoothing": "none", **NO_RAMP})
    rig.run_until(lambda: len(rig.chunks()) >= 2)
    first, second = rig.chunks()[:2]
    # The reply takes 150 ms; the first point must be at least one period (20 ms)
    # ahead: the first slot is action 9's (180 ms). The arm stood still since the
    # observation, so the chunk starts with action 0 (the state) in that slot
    # instead of jumping to action 9.
    assert first_time(first) - parse_t_obs(first.frame_id) == pytest.approx(9 * DT)
    assert len(first.points.time_from_start) == H
    np.testing.assert_allclose(first.points.positions[0], rig.state[:6], atol=1e-6)
    # The next one arrives while the first runs: its stale actions are dropped.
    index = round((first_time(second) - parse_t_obs(second.frame_id)) / DT)
    assert index >= 9
    assert len(second.points.time_from_start) == H - index
    np.testing.assert_allclose(second.points.positions[0], rig.state[:6] + index * 0.002, atol=1e-6)


def test_switch_after_execute_horizon_and_early_requests() -> None:
    execute = 10
    rig = streaming_rig(overrides={"execute_horizon": execute, "request_lead_s": 0.1, **NO_RAMP})
    rig.run_until(lambda: len(rig.chunks()) >= 5)
    got = rig.chunks()
    for old, new in zip(got[1:4], got[2:5]):
        switch_time = first_time(old) + (execute - 1) * DT  # the last executed action
        # Published at the switch time (within a tick), first point in the next slot.
        assert new.points.stamp == pytest.approx(switch_time, abs=0.011)
        assert first_time(new) == pytest.approx(switch_time + DT, abs=1e-6)
        # Early request: the observation was taken request_lead_s before the switch.
        assert parse_t_obs(new.frame_id) == pytest.approx(switch_time - 0.1, abs=0.011)


def test_groot_chunks_go_to_each_action_group() -> None:
    rig = streaming_rig(model="groot", overrides=NO_RAMP)
    rig.run_until(lambda: rig.chunks("gripper"))
    arm = rig.chunks("arm")[0]
    assert arm.joint_names == ("joint1", "joint2", "joint3", "joint4", "joint5")
    np.testing.assert_allclose(np.diff(arm.points.time_from_start), 1.0 / 30.0, atol=1e-9)
    assert set(rig.observations[0]["video"]) == {"video.front", "video.wrist"}


def test_dry_run_publishes_only_on_preview() -> None:
    rig = streaming_rig(overrides={"dry_run": True})
    rig.run_until(lambda: len(rig.messages(None)) >= 4)
    assert rig.messages("arm") == [] and rig.messages("gripper") == []
    names = {m.joint_names for m in rig.messages(None)}
    assert names == {
        ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6"),
        ("gripper_joint",),
    }


# ------------------------------------------------------------------ refusals


def _policy(mode: str):
    base = ramp_policy(H)

    def infer(obs):
        actions = base(obs)
        if mode == "nan":
            actions[10, 2] = np.nan
        elif mode == "inf":
            actions[3, 0] = np.inf
        elif mode == "limits":
            actions[:, 1] = 1.7 + np.arange(H) * 0.01  # joint2 limits are [-1.8, 1.8]
        elif mode == "far":
            actions += 0.6  # within limits, but a 0.6 rad jump from the state
        elif mode == "error":
            return {"type": "error", "message": "Internal inference error"}
        elif mode == "shape":
            return actions[:, :5]
        return actions

    return infer


@pytest.mark.parametrize(
    ("mode", "reason", "counter"),
    [
        ("error", "error reply from the server: Internal inference error", "error_replies"),
        ("nan", "non-finite value nan at step 10, joint 'joint3'", "refusals"),
        ("inf", "non-finite value inf at step 3, joint 'joint1'", "refusals"),
        ("limits", "joint 'joint2' (dim 1) is 2.1900 at step 49, above", "refusals"),
        ("far", "first point moves joint 'joint1' by 0.6", "refusals"),
        ("shape", "malformed reply: actions have shape (50, 5)", "error_replies"),
    ],
)
def test_unsafe_replies_are_never_published(mode: str, reason: str, counter: str) -> None:
    rig = streaming_rig(policy=_policy(mode))
    rig.run(2.0)
    assert rig.published == []
    health = rig.health()
    assert health.level == Level.WARN and health.message.startswith("holding position")
    assert reason in health.values["hold_reason"], health.values
    assert rig.core.counts[counter] >= 1
    # Failed requests are retried every retry_delay_s (0.25 s), not at the timer rate:
    # 2 s / (50 ms latency + 250 ms back-off) ~ 7 requests.
    assert 5 <= rig.core.counts["requests"] <= 8


def test_clamp_mode_publishes_clamped_positions() -> None:
    rig = CoreRig(policy=_policy("limits"), overrides={"limits_mode": "clamp"})
    rig.state[1] = 1.7
    rig.connect()
    rig.run_until(lambda: rig.chunks())
    joint2 = rig.chunks()[0].points.positions[:, 1]
    assert joint2.max() == 1.8 and joint2[-1] == 1.8 and joint2[0] < 1.8


def test_stale_camera_holds_once_and_says_why() -> None:
    rig = streaming_rig(overrides={"sensor_timeout_s": 0.3})
    rig.run_until(lambda: len(rig.chunks()) >= 2)
    rig.cameras_on = False
    rig.run(1.5)
    hold = rig.core.hold_reason
    assert hold is not None and hold.startswith("stale observation: stale inputs:")
    assert "camera 'base_0_rgb'" in hold and "sensor_timeout_s" in hold
    # One hold message per controller, a single point with zero velocity, no chunk since.
    holds = rig.holds()
    assert len(holds) == 1 and rig.messages("arm")[-1] is holds[0]
    assert holds[0].points.positions.shape == (1, 6) and not holds[0].points.velocities.any()
    assert "holding position: stale observation" in rig.log.text("warning")
    # Streaming resumes when the cameras are back.
    chunks = len(rig.chunks())
    rig.cameras_on = True
    rig.run_until(lambda: len(rig.chunks()) > chunks)
    assert rig.core.hold_reason is None


def test_stale_joint_states_stop_requests() -> None:
    rig = streaming_rig(overrides={"sensor_timeout_s": 0.3})
    rig.run_until(lambda: len(rig.chunks()) >= 2)
    rig.joint_states_on = False
    rig.run(0.5)
    requests = rig.core.counts["requests"]
    rig.run(1.0)
    assert rig.core.counts["requests"] == requests  # no observation while stale
    assert rig.core.hold_reason.startswith("joint states: joint 'joint1' is stale")


def test_missing_joint_gives_no_observation() -> None:
    rig = streaming_rig()
    rig.joints[2] = "elbow_typo"
    rig.run(1.0)
    assert rig.core.counts["requests"] == 0 and rig.published == []
    assert "joint states" in rig.core.hold_reason and "joint3" in rig.core.hold_reason
    assert "waiting before the first request" in rig.log.text("info")


def test_malformed_joint_state_message_is_refused_not_fatal() -> None:
    rig = streaming_rig()
    rig.core.joint_state(["joint1", "joint2"], [0.1], rig.now)
    assert rig.core.last_refusal == (
        "joint states: JointState has 2 names but 1 positions; expected one position per name"
    )
    rig.run_until(lambda: rig.chunks())


# ------------------------------------------------------------------ connection


def test_health_is_error_until_connected_and_the_server_fits() -> None:
    rig = CoreRig()
    rig.run(0.5)
    health = assess(rig.core, rig.now, connected=False, connection_error="refused")
    assert (health.level, health.message) == (
        Level.ERROR,
        "not connected to the policy server: refused",
    )
    bad = CoreRig(
        metadata={"model": "pi05", "action_horizon": 50, "control_hz": 50, "max_cameras": 1}
    )
    bad.connect()
    bad.run(0.5)
    health = bad.health()
    assert health.level == Level.ERROR and bad.observations == []
    assert health.message == (
        "configuration does not fit the server: 2 cameras ['base_0_rgb', 'left_wrist_0_rgb'] "
        "exceed max_cameras=1"
    )


def test_reconnect_drops_old_replies_and_keeps_latency_and_counts() -> None:
    rig = streaming_rig()
    rig.run_until(lambda: len(rig.chunks()) >= 2)
    rig.run_until(lambda: rig.in_flight is not None)
    stale_tag = rig.in_flight.tag
    rig.disconnect("server restarted")
    assert rig.core.hold_reason == "disconnected from the policy server: server restarted"
    latencies = rig.core.latency.count
    published = rig.core.counts["chunks_published"]
    rig.connect()
    # A reply for the old connection's request is dropped, never published.
    rig.core.result(
        InferOutcome(stale_tag, ramp_policy(H)({"state": np.zeros(32)}), 0.0, None, None), rig.now
    )
    rig.run_until(lambda: rig.core.counts["chunks_published"] > published)
    assert rig.core.latency.count > latencies
    assert rig.core.counts["connection_errors"] == 2  # the request and the disconnect


def test_foreign_tags_are_ignored() -> None:
    rig = streaming_rig()
    rig.core.result(InferOutcome(("a", "tuple"), None, None, None, "closed"), rig.now)
    assert rig.core.counts["connection_errors"] == 0


# ------------------------------------------------------------------ services


def test_reset_starts_a_new_session_and_drops_the_old_reply() -> None:
    rig = streaming_rig(metadata=None)
    rig.metadata["needs_session_id"] = True
    rig.connect()
    rig.run_until(lambda: len(rig.chunks()) >= 1)
    rig.run_until(lambda: rig.in_flight is not None)
    first = rig.core.session_id
    message = rig.core.reset_episode(rig.now)
    assert message == f"new episode, session {rig.core.session_id}" and rig.server_resets == 1
    assert rig.core.hold_reason == "episode reset: waiting for a chunk from the new session"
    published = rig.core.counts["chunks_published"]
    rig.run_until(lambda: rig.core.counts["chunks_published"] > published)
    sessions = [obs["session_id"] for obs in rig.observations]
    assert first in sessions and sessions[-1] == rig.core.session_id != first
    assert rig.core.hold_reason is None


def test_enable_stops_and_restarts_commanding() -> None:
    rig = streaming_rig(stopped={"enable": ENABLE_STOP})
    rig.run(1.0)
    assert rig.published == [] and rig.core.counts["requests"] == 0
    assert rig.health().message == ENABLE_STOP
    assert (
        rig.core.set_enabled(True, rig.now) == "enabled: commanding from the next fresh observation"
    )
    rig.run_until(lambda: len(rig.chunks()) >= 2)
    assert rig.core.set_enabled(False, rig.now) == "disabled: holding position"
    count = len(rig.messages("arm"))
    rig.run(1.0)
    assert len(rig.messages("arm")) == count and rig.messages("arm")[-1].frame_id == ""
    assert rig.core.set_enabled(False, rig.now) == "already disabled"


def test_switches_hold_once_show_the_first_reason_and_resume_when_all_are_released() -> None:
    rig = streaming_rig()
    rig.run_until(lambda: len(rig.chunks()) >= 2)
    rig.core.set_switch("deadman", "dead-man switch released", rig.now)
    holds = [m for _, m in rig.published if m.output == "arm" and m.frame_id == ""]
    assert len(holds) == 1 and rig.core.hold_reason == "dead-man switch released"
    # A second stop while stopped: the lifecycle's reason comes first, no second hold.
    rig.core.set_switch("lifecycle", "inactive", rig.now)
    assert rig.core.stop_reason == "inactive" == rig.core.hold_reason
    assert rig.health().message == "inactive"
    count, requests = len(rig.published), rig.core.counts["requests"]
    rig.run(1.0)
    rig.core.set_switch("lifecycle", None, rig.now)  # the dead-man switch still stops it
    rig.run(1.0)
    assert len(rig.published) == count and rig.core.counts["requests"] == requests
    assert rig.core.stop_reason == "dead-man switch released" and not rig.core.enabled
    rig.core.set_switch("deadman", None, rig.now)
    assert rig.core.enabled and rig.core.hold_reason is None
    rig.run_until(lambda: len(rig.chunks()) >= 3)
    with pytest.raises(ValueError, match="not one of"):
        rig.core.set_switch("joystick", "x", rig.now)
    with pytest.raises(ValueError, match="without a reason"):
        rig.core.set_switch("deadman", "", rig.now)


def test_prompt_replaces_the_prompt_of_the_next_observation() -> None:
    rig = streaming_rig()
    rig.run_until(lambda: rig.observations)
    assert rig.observations[0]["prompt"] == rig.config.prompt
    rig.core.set_prompt("open the drawer")
    rig.run_until(lambda: rig.observations[-1]["prompt"] == "open the drawer")
    assert "prompt changed to 'open the drawer'" in rig.log.text("info")


# ------------------------------------------------------------------ live configuration


def test_apply_config_takes_effect_at_once() -> None:
    rig = streaming_rig(overrides=NO_RAMP)
    rig.run_until(lambda: len(rig.chunks()) >= 2)
    changed = dataclasses.replace(
        rig.config,
        prompt="wave",
        seed=7,
        execute_horizon=10,
        request_lead_s=0.1,
        smoothing="crossfade",
        blend_steps=3,
        sensor_timeout_s=0.2,
    )
    rig.core.apply_config(changed, rig.now)
    assert rig.core.config is changed and rig.core.prompt == "wave"
    published = len(rig.chunks())
    rig.run_until(lambda: len(rig.chunks()) >= published + 2)
    assert rig.observations[-1]["prompt"] == "wave" and rig.observations[-1]["seed"] == 7
    new = rig.chunks()[-1]
    old = rig.chunks()[-2]
    # execute_horizon 10: the next chunk follows 10 actions after the previous one's first.
    assert first_time(new) == pytest.approx(first_time(old) + 10 * DT, abs=1e-6)


def test_dry_run_switched_on_stops_the_controllers_before_returning() -> None:
    rig = streaming_rig()
    rig.run_until(lambda: len(rig.chunks()) >= 2)
    arm_before = len(rig.messages("arm"))
    rig.core.apply_config(dataclasses.replace(rig.config, dry_run=True), rig.now)
    # A hold at the commanded position went to the controllers at once...
    assert len(rig.messages("arm")) == arm_before + 1 and rig.messages("arm")[-1].frame_id == ""
    rig.run(1.0)
    # ...and nothing since: chunks go to ~/preview only.
    assert len(rig.messages("arm")) == arm_before + 1
    assert rig.chunks(None) and rig.core.hold_reason is None
    # Switched off again: commanding resumes from the next chunk, no hold to the preview pose.
    rig.core.apply_config(dataclasses.replace(rig.config, dry_run=False), rig.now)
    rig.run_until(lambda: len(rig.messages("arm")) > arm_before + 1)
    assert rig.messages("arm")[-1].frame_id.startswith("t_obs=")


def test_apply_config_refuses_what_needs_a_restart_and_changes_nothing() -> None:
    rig = streaming_rig()
    rig.run_until(lambda: rig.chunks())
    before = rig.core.config
    with pytest.raises(StreamingConfigError) as info:
        rig.core.apply_config(dataclasses.replace(before, model="pi0", tick_hz=50.0), rig.now)
    assert str(info.value) == (
        "['model', 'tick_hz'] cannot change while the node runs; restart the node with the "
        "new values"
    )
    with pytest.raises(StreamingConfigError, match="execute_horizon 60 must be >= 1 and <= 50"):
        rig.core.apply_config(dataclasses.replace(before, execute_horizon=60), rig.now)
    with pytest.raises(StreamingConfigError, match=r"limits_mode 'off' is not one of"):
        rig.core.apply_config(dataclasses.replace(before, limits_mode="off"), rig.now)
    with pytest.raises(StreamingConfigError, match="max_joint_step 0.0 must be a number > 0"):
        rig.core.apply_config(dataclasses.replace(before, max_joint_step=0.0), rig.now)
    with pytest.raises(StreamingConfigError, match="joint_limits|lower < upper"):
        limits = dict(before.joint_limits, joint1=(1.0, -1.0))
        rig.core.apply_config(dataclasses.replace(before, joint_limits=limits), rig.now)
    assert rig.core.config is before


# ------------------------------------------------------------------ bookkeeping


def test_request_tag_carries_generation_session_and_timing() -> None:
    rig = streaming_rig()
    rig.run_until(lambda: rig.in_flight is not None)
    tag = rig.in_flight.tag
    assert isinstance(tag, RequestTag)
    assert (tag.generation, tag.session_id, tag.t_obs) == (1, rig.core.session_id, rig.now)
    # Frames are converted on arrival when a request is due before the next one
    # (wall-clock conversion time, not the rig's synthetic clock).
    assert tag.start.frame_before_s >= 0.0
    assert rig.core.pipeline_timing["frame_processing"].count >= len(rig.camera_keys)


def test_stall_time_survives_a_reconnect() -> None:
    # A slow server: replies take longer than the lead, so the robot stalls a little.
    rig = streaming_rig(latency_s=0.3, overrides={"request_lead_s": 0.05, "execute_horizon": 40})
    rig.run_until(lambda: len(rig.chunks()) >= 3)
    stalled = rig.core.stall_time(rig.now)
    assert stalled > 0
    rig.disconnect()
    rig.connect()
    assert rig.core.stall_time(rig.now) == pytest.approx(stalled)
    assert float(rig.health().values["stall_time_s"]) == pytest.approx(stalled, abs=1e-3)


# ------------------------------------------------------------------ faults


def test_nan_in_an_uncommanded_dimension_refuses_the_chunk() -> None:
    base = ramp_policy(H)

    def padding_nan(obs):
        actions = base(obs)
        actions[4, 20] = np.nan  # dim 20 drives no joint (pi05 pads to 32)
        return actions

    rig = streaming_rig(policy=padding_nan)
    rig.run(1.0)
    assert rig.published == []
    assert rig.core.last_refusal == (
        "action chunk has a non-finite value nan at step 4, dim 20; refusing the whole chunk"
    )


def test_last_refusal_and_refusal_count_agree() -> None:
    # Waiting for the first frames and joint states is a hold, not a refusal.
    fresh = CoreRig()
    fresh.connect()
    fresh.core.tick(fresh.now)
    assert fresh.core.hold_reason == (
        "no frame yet from camera 'base_0_rgb' on base_0_rgb; "
        "no frame yet from camera 'left_wrist_0_rgb' on left_wrist_0_rgb"
    )
    assert fresh.core.last_refusal is None and fresh.core.counts["refusals"] == 0
    # Each refusal is counted and named.
    rig = streaming_rig(policy=_policy("far"))
    rig.run(0.5)
    assert rig.core.counts["refusals"] >= 1
    assert rig.core.last_refusal.startswith("first point moves joint 'joint1' by 0.6")
    # An observation refused for stale inputs is one refusal per hold, however long.
    good = streaming_rig()
    good.run_until(lambda: good.chunks())
    good.cameras_on = False
    good.run_until(lambda: (good.core.hold_reason or "").startswith("stale observation"))
    assert good.core.counts["refusals"] == 1
    assert good.core.last_refusal == good.core.hold_reason
    good.run(1.0)
    assert good.core.counts["refusals"] == 1


def test_a_robot_waiting_for_a_chunk_is_warn_never_ok() -> None:
    rig = streaming_rig()
    rig.run_until(lambda: len(rig.chunks()) >= 2)
    assert rig.health().level == Level.OK
    rig.latency_s = 1e6  # the server swallows the next request
    rig.run_until(lambda: rig.health().level == Level.WARN, timeout_s=2.0)
    health = rig.health()
    assert health.message.startswith("stalled, waiting for a chunk: the last trajectory ended 0.0")
    assert "a request has been in flight for" in health.message
    # Before anything was published it is WARN too.
    waiting = streaming_rig(latency_s=1e6)
    waiting.run(0.5)
    assert waiting.health().level == Level.WARN
    assert waiting.health().message.startswith("waiting for a chunk: nothing to follow yet")


def test_request_timeout_follows_measured_latency() -> None:
    rig = streaming_rig(latency_s=0.3)
    assert rig.core.request_timeout() == 30.0  # nothing measured yet
    rig.run_until(lambda: rig.core.latency.count >= 1)
    assert rig.core.request_timeout() == pytest.approx(3.0)  # 10 x p99 (0.3 s)
    fast = streaming_rig(latency_s=0.05)
    fast.run_until(lambda: fast.core.latency.count >= 1)
    assert fast.core.request_timeout() == 2.0  # never below 2 s
    fixed = streaming_rig(overrides={"request_timeout_s": 0.7})
    assert fixed.core.request_timeout() == 0.7


def test_a_swallowed_request_times_out_holds_reconnects_and_resumes() -> None:
    rig = streaming_rig()
    rig.run_until(lambda: len(rig.chunks()) >= 3)
    published = len(rig.chunks())
    rig.latency_s = 1e6  # swallowed
    rig.run_until(lambda: rig.timeouts == 1, timeout_s=5.0)
    assert rig.core.hold_reason == (
        "disconnected from the policy server: no reply within request_timeout_s = 2.0 s"
    )
    assert rig.holds() and rig.health().level == Level.ERROR  # not connected
    rig.latency_s = 0.05  # the server answers again after the reconnect
    rig.run_until(lambda: len(rig.chunks()) > published, timeout_s=2.0)
    assert rig.core.hold_reason is None and rig.health().level == Level.OK
