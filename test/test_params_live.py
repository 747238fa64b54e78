"""Live parameters of policy_node, set from another node through its parameter services.

Each test runs the node against a real server on loopback (test/node_rig.py),
changes a parameter with rclpy's ``AsyncParameterClient`` (what ``ros2 param set``
does) and watches the effect on what the node publishes or sends to the server.
Read-only parameters and bad values must be refused with a reason.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numpy as np
import pytest
from helpers import scaled, wait_until
from node_rig import PI_JOINTS, Received, Rig, stamp_of, t_obs_of, velocity_overrides
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient

from relay_ros.pipeline.camera_frames import FRAME_LOOKAHEAD_S
from relay_ros.server import ServerOptions, run_server_in_thread

pytestmark = pytest.mark.ros

DT = 1.0 / 50.0  # reference pi05 control_hz
H = 50


class RecordingPolicy:
    """A server policy that records prompts and seeds and can misbehave on purpose.

    ``follow``: state + a ramp (the same chunk for the same state); ``limits``:
    joint2 beyond its [-1.8, 1.8] limits; ``far``: 0.6 rad from the state;
    ``raise``: every request fails.
    """

    def __init__(self, mode: str = "follow") -> None:
        self.mode = mode
        self.prompts: list[str] = []
        self.seeds: list[Any] = []
        self.times: list[float] = []  # time.monotonic() of each request
        self._lock = threading.Lock()

    def infer(self, obs: dict) -> dict:
        with self._lock:
            self.prompts.append(obs.get("prompt"))
            self.seeds.append(obs.get("seed"))
            self.times.append(time.monotonic())
        if self.mode == "raise":
            raise RuntimeError("model crashed on purpose")
        state = np.asarray(obs["state"], dtype=np.float32).reshape(-1)
        actions = state[None, :] + np.arange(H, dtype=np.float32)[:, None] * 0.002
        if self.mode == "limits":
            actions[:, 1] = 1.7 + np.arange(H) * 0.01
        elif self.mode == "far":
            actions += 0.6
        return {"actions": actions.astype(np.float32)}

    def reset(self) -> None:
        pass

    def requests(self) -> int:
        with self._lock:
            return len(self.prompts)


@pytest.fixture
def recording():
    """(policy, server) whose policy records every observation; mode settable per test."""
    policy = RecordingPolicy()
    options = ServerOptions(models=("pi05",), policy=lambda: policy)
    with run_server_in_thread(options) as server:
        yield policy, server


@pytest.fixture
def live(ros_context, recording, tmp_path):
    """Opens policy_node on the recording server, with a parameter client:
    ``rig, params = live(**rig_options)`` (test/node_rig.py); closed at teardown."""
    _, server = recording
    with contextlib.ExitStack() as stack:

        def open_node(**options: Any) -> tuple[Rig, Params]:
            rig = Rig(ros_context, server.url_template, tmp_path=tmp_path, **options)
            stack.enter_context(rig)
            return rig, Params(rig)

        yield open_node


class Params:
    """``ros2 param`` for a rig's node, from the rig's feeder node."""

    def __init__(self, rig: Rig) -> None:
        self._client = AsyncParameterClient(rig.feeder, rig.node_name)
        assert self._client.wait_for_services(timeout_sec=scaled(10.0))

    def set(self, **values: Any) -> tuple[Any, float]:
        """Set one parameter; its SetParametersResult and the wall time the call returned."""
        assert len(values) == 1
        future = self._client.set_parameters([Parameter(k, value=v) for k, v in values.items()])
        wait_until(future.done, timeout=10.0)
        returned = time.time()
        return future.result().results[0], returned

    def get(self, name: str) -> Any:
        future = self._client.get_parameters([name])
        wait_until(future.done, timeout=10.0)
        return Parameter.from_parameter_msg(_named(name, future.result().values[0])).value

    def describe(self, name: str) -> Any:
        future = self._client.describe_parameters([name])
        wait_until(future.done, timeout=10.0)
        return future.result().descriptors[0]


def _named(name: str, value: Any) -> Any:
    from rcl_interfaces.msg import Parameter as ParameterMsg

    return ParameterMsg(name=name, value=value)


def _chunks_after(messages: list, t: float) -> list:
    """Chunk messages (more than one point) stamped after ``t``."""
    return [m for m in messages if stamp_of(m) > t and len(m.points) > 1]


# ---------------------------------------------------------------- dry_run


def test_dry_run_true_stops_commanding_before_the_set_returns(live):
    rig, params = live()
    wait_until(lambda: len(rig.snapshot().arm) >= 2, timeout=15)
    result, returned = params.set(dry_run=True)
    assert result.successful, result.reason
    # The node keeps streaming, to ~/preview only.
    wait_until(lambda: len(_chunks_after(rig.snapshot().preview, returned)) >= 4, timeout=10)
    assert params.get("dry_run") is True
    # Streaming (OK) in dry run, once the hold the switch sent has run (a loaded
    # machine may hold or stall it for a moment).
    status = wait_until(
        lambda: (s := rig.last_status()) and s["dry_run"] == "True" and s["level"] == 0 and s,
        timeout=15,
    )
    leaving = time.time()
    result, enabled_at = params.set(dry_run=False)
    assert result.successful, result.reason
    # Chunks on both controller topics from after the switch back: each topic delivers
    # in order, so whatever the node published while in dry run has arrived by now.
    wait_until(lambda: _chunks_after(rig.snapshot().arm, enabled_at), timeout=10)
    wait_until(lambda: _chunks_after(rig.snapshot().gripper, enabled_at), timeout=10)
    got = rig.snapshot()
    in_dry_run = [stamp_of(m) for m in got.arm + got.gripper if returned <= stamp_of(m) < leaving]
    # Nothing reached the controllers from the moment the set call returned...
    assert in_dry_run == []
    # ...and the last command they got is a hold where the robot was commanded to be.
    arm = [m for m in got.arm if stamp_of(m) < returned]
    gripper = [m for m in got.gripper if stamp_of(m) < returned]
    assert len(arm[-1].points) == 1 and len(gripper[-1].points) == 1
    assert list(arm[-1].points[0].velocities) == [0.0] * 6
    assert status["message"] == "streaming"


def test_dry_run_set_before_any_chunk_sends_no_hold(live):
    # A managed node, configured (connected) but not active: nothing commanded yet.
    rig, params = live(overrides={"autostart": False})
    assert rig.change_state("configure")
    result, _ = params.set(dry_run=True)
    assert result.successful, result.reason
    assert params.set(dry_run=False)[0].successful
    # Start commanding: the arm topic delivers in order, so a hold sent for dry_run
    # would come before the first chunk.
    assert rig.change_state("activate")
    first = wait_until(lambda: rig.snapshot().arm, timeout=15)[0]
    assert len(first.points) > 1, "a hold reached the arm before the first chunk"


# ---------------------------------------------------------------- what the server sees


def test_prompt_and_seed_reach_the_server_from_the_next_observation(recording, live):
    policy, _ = recording
    rig, params = live()
    wait_until(lambda: policy.requests() >= 2, timeout=15)
    assert policy.prompts[-1] == "stack the blocks" and policy.seeds[-1] is None
    assert params.set(prompt="open the drawer")[0].successful
    seen = policy.requests()
    wait_until(lambda: policy.requests() >= seen + 2, timeout=10)
    assert policy.prompts[-1] == "open the drawer"
    assert params.set(seed=42)[0].successful
    seen = policy.requests()
    wait_until(lambda: policy.requests() >= seen + 2, timeout=10)
    assert policy.seeds[-1] == 42
    assert params.set(seed=-1)[0].successful
    seen = policy.requests()
    wait_until(lambda: policy.requests() >= seen + 2, timeout=10)
    assert policy.seeds[-1] is None
    # The ~/prompt topic sets the parameter too: `ros2 param get` shows the prompt in use.
    rig.publish_prompt("wipe the table")
    wait_until(lambda: params.get("prompt") == "wipe the table", timeout=10)
    seen = policy.requests()
    wait_until(lambda: policy.requests() >= seen + 2, timeout=10)
    assert policy.prompts[-1] == "wipe the table"


# ---------------------------------------------------------------- the timeline


TIMELINE = {"execute_horizon": 25, "request_lead_s": "0.1"}


def _planned_gap(chunks: list) -> float:
    """From a chunk's switch (its stamp) to the observation of the next chunk, as the
    node plans it: ``execute_horizon * dt - request_lead_s``.

    The node requests ``request_lead_s`` before the next switch, which it plans
    ``execute_horizon`` actions after this one, whenever the reply comes: a late reply
    moves the next switch, not this gap. A request goes early by up to its read window
    (frame_arrival timing: when every camera has a new frame, in the camera period
    before the request is due, at most FRAME_LOOKAHEAD_S; a loaded machine's frames
    come unevenly) and late by as much as a loaded machine runs the tick late: the
    smallest of several gaps is the planned one, up to FRAME_LOOKAHEAD_S early.
    """
    return min(t_obs_of(b) - stamp_of(a) for a, b in zip(chunks, chunks[1:]))


def _planned(measured: float, planned: float) -> bool:
    """``measured`` (from :func:`_planned_gap`) is ``planned``: up to a read window
    early, or a little late (when every request of the sample was late)."""
    return planned - FRAME_LOOKAHEAD_S - 0.005 <= measured <= planned + 0.05


def _before_and_after(
    live,
    measure,
    counts: tuple[int, int],
    rig_options: dict | None = None,
    topic: str = "arm",
    with_holds: bool = False,
    **change: Any,
) -> tuple:
    """``measure(chunks)`` over the chunks (holds skipped, unless ``with_holds``: then
    in the order they came) on ``topic`` (a field of ``Received``) before and after a
    live change.

    Before: from the second chunk (the first switch comes at start-up, on its own
    timing) once ``counts[0]`` have come; after: from 0.6 s after the set returned
    (the chunk held at the change may still follow the old value) once
    ``counts[1]`` have come. ``rig_options`` replace the default (the TIMELINE
    overrides). Returns (before, after, params).
    """
    rig, params = live(**(rig_options or {"overrides": TIMELINE}))

    def messages() -> tuple[Received, list]:
        # (In a dry run ~/preview carries one message per controller: the arm's.)
        got = rig.snapshot()
        return got, [m for m in getattr(got, topic) if m.joint_names[0] == "joint1"]

    def chunks_after(t: float) -> list:
        return _chunks_after(messages()[1], t)

    def measured_after(t: float, skip: int = 0) -> Any:
        if not with_holds:
            return measure(chunks_after(t)[skip:])
        got, every = messages()
        after = [m for m in every if got.start_of(m) > t]
        first = chunks_after(t)[skip]
        return measure(after[after.index(first) :])

    wait_until(lambda: len(chunks_after(0.0)) >= counts[0] + 1, timeout=15)
    before = measured_after(0.0, skip=1)
    result, returned = params.set(**change)
    assert result.successful, result.reason
    wait_until(lambda: len(chunks_after(returned + 0.6)) >= counts[1], timeout=20)
    return before, measured_after(returned + 0.6), params


def test_execute_horizon_changes_the_switch_spacing(live):
    # The spacing the node plans, horizon * dt = gap + lead (see _planned_gap).
    before, after, _ = _before_and_after(
        live, lambda chunks: _planned_gap(chunks) + 0.1, (6, 6), execute_horizon=10
    )
    assert _planned(before, 25 * DT), before
    assert _planned(after, 10 * DT), after


def test_request_lead_changes_how_early_observations_are_taken(live):
    # The lead the node plans, horizon * dt - gap (see _planned_gap). A double works as
    # well as "0.3".
    before, after, params = _before_and_after(
        live, lambda chunks: _planned_gap(chunks), (6, 6), request_lead_s=0.3
    )
    assert params.set(request_lead_s="auto")[0].successful
    # Observations are taken at the switch minus the lead: 0.1 s, then 0.3 s.
    assert _planned(before, 25 * DT - 0.1), before
    assert _planned(after, 25 * DT - 0.3), after


def _departures(messages: list) -> list[float]:
    """How far each chunk's first point (joint1) is from the still arm (0.1 rad)."""
    return [abs(m.points[0].positions[0] - 0.1) for m in messages]


def test_smoothing_changes_live(live):
    # A dry run of a still arm (follow=False): nothing published moves the arm, so every
    # chunk joins the arm where it stands (the gate's commanded state in a dry run). The
    # policy's chunks start at the state and move 0.002 rad per action; the node starts
    # each one at the action due when it arrives (latency compensation).
    rig_options = {
        "overrides": {**TIMELINE, "smoothing": "none", "dry_run": True},
        "follow": False,
    }

    before, after, _ = _before_and_after(
        live, _departures, (4, 3), rig_options=rig_options, topic="preview", smoothing="splice"
    )
    # Unsmoothed: the first point is at least one action of the chunk into its motion,
    # a step from where the arm stands.
    assert min(before) >= 0.002 - 1e-6
    # Spliced: the first point leaves the standing arm gently, from rest.
    assert max(after) < 0.001


# ---------------------------------------------------------------- safety checks


def test_limits_mode_clamp_lets_a_refused_policy_through(recording, live):
    policy, _ = recording
    policy.mode = "limits"
    rig, params = live(state=[0.1, 1.7, 0.1, 0.1, 0.1, 0.1, 0.1])
    wait_until(lambda: (s := rig.last_status()) and "joint2" in s["last_refusal"], timeout=15)
    assert rig.snapshot().arm == []
    assert params.set(limits_mode="clamp")[0].successful
    msg = wait_until(lambda: rig.snapshot().arm, timeout=10)[0]
    result, _ = params.set(limits_mode="ignore")
    joint2 = [p.positions[1] for p in msg.points]
    assert max(joint2) == 1.8
    assert not result.successful
    assert "parameter 'limits_mode' is 'ignore'; expected one of ['refuse', 'clamp']" in (
        result.reason
    )


def test_max_joint_step_decides_which_first_step_is_refused(recording, live):
    policy, _ = recording
    policy.mode = "far"  # every chunk starts 0.6 rad from the measured state
    # 0.6 rad within a period is far over the robot's velocity limits: raised here, so
    # that max_joint_step alone decides, and measured on ~/preview (dry run): no
    # controller is ever sent what the robot cannot do. No smoothing: the splice fades
    # each preview in from the arm as measured (what a dry run's previews join), so the
    # first point never jumps (test_gate_chunks.py: max_joint_step and the splice).
    rig, params = live(
        overrides={
            **velocity_overrides(PI_JOINTS, 100.0),
            "dry_run": True,
            "smoothing": "none",
        }
    )
    wait_until(lambda: (s := rig.last_status()) and s["last_refusal"], timeout=15)
    assert _chunks_after(rig.snapshot().preview, 0.0) == []
    assert params.set(max_joint_step=1.0)[0].successful
    wait_until(lambda: _chunks_after(rig.snapshot().preview, 0.0), timeout=10)
    refused = rig.node.counts["refusals"]
    result, returned = params.set(max_joint_step=0.25)
    assert result.successful
    # A chunk accepted just before the change may still go out; after the first
    # refusal under the new step, three more replies come and none is published.
    wait_until(lambda: rig.node.counts["refusals"] > refused, timeout=10)
    published = rig.node.counts["chunks_published"]
    wait_until(lambda: rig.node.counts["refusals"] >= refused + 4, timeout=15)
    assert rig.node.counts["chunks_published"] == published
    assert _chunks_after(rig.snapshot().preview, returned + 0.2) == []
    assert rig.snapshot().arm == rig.snapshot().gripper == []


def test_sensor_timeout_decides_what_is_stale(live):
    rig, params = live()
    wait_until(lambda: len(rig.snapshot().arm) >= 2, timeout=15)
    rig.cameras_on = False  # the last frames age past sensor_timeout_s (0.5 s)
    wait_until(lambda: (s := rig.last_status()) and "camera" in s["hold_reason"], timeout=10)
    # With a timeout longer than their age, the same frames are fresh again.
    result, returned = params.set(sensor_timeout_s=60.0)
    assert result.successful, result.reason
    wait_until(lambda: len(_chunks_after(rig.snapshot().arm, returned)) >= 2, timeout=10)


def test_retry_delay_spaces_failed_requests(recording, live):
    policy, _ = recording
    policy.mode = "raise"
    rig, params = live()
    wait_until(lambda: policy.requests() >= 2, timeout=15)
    assert params.set(retry_delay_s=1.0)[0].successful
    changed = time.monotonic()

    def after_change() -> list[float]:
        with policy._lock:
            return [t for t in policy.times if t > changed]

    times = wait_until(lambda: len(t := after_change()) >= 3 and t, timeout=15)
    # The first may be a retry scheduled before the change; from it on, each waits
    # the new delay (0.25 s, the default, would space them 4 times closer).
    assert min(np.diff(times[:3])[1:]) >= 0.9, np.diff(times)


# ---------------------------------------------------------------- refusals


REFUSED = [
    ("model", "not_a_model", "read-only"),
    ("model", "pi0", "read-only"),
    ("policy_url", "ws://elsewhere:8000/{model}", "read-only"),
    ("outputs.arm.topic", "/other", "read-only"),
    ("joint_limits.joint1.min_position", 5.0, "must be finite with min_position < max_position"),
    (
        "joint_limits.joint1.max_velocity",
        -1.0,
        "max_velocity is -1.0; expected a finite number > 0",
    ),
    ("joint_limits.joint1.has_velocity_limits", False, "has_velocity_limits is false"),
    ("tick_hz", 10.0, "read-only"),
    ("execute_horizon", -5, "execute_horizon"),
    ("execute_horizon", 60, "must be >= 1 and <= 50"),  # the server's action_horizon: 50
    ("max_joint_step", 0.0, "max_joint_step"),
    ("request_lead_s", "soon", "parameter 'request_lead_s' is 'soon'; expected 'auto'"),
    ("request_lead_s", 11.0, "expected 'auto' or seconds from 0 to 10"),
    ("smoothing", "spline", "parameter 'smoothing' is 'spline'; expected one of"),
    ("smoothing", "prefix", "needs a server that advertises the action_prefix extension"),
    ("blend_steps", 5, "blend_steps 5 is the length of smoothing 'crossfade'"),
    ("dry_run", "yes", "type"),
    ("seed", -3, "seed"),
]


def test_refused_with_a_reason_and_nothing_changes(live):
    rig, params = live()
    wait_until(lambda: rig.snapshot().arm, timeout=15)
    config = rig.node.config
    outcomes = []
    for name, value, _ in REFUSED:
        before = params.get(name)
        result, _ = params.set(**{name: value})
        outcomes.append((result, before, params.get(name)))
    # Still streaming, with the configuration it had.
    count = len(rig.snapshot().arm)
    wait_until(lambda: len(rig.snapshot().arm) > count + 1, timeout=10)
    assert rig.node.config == config
    for (name, value, reason), (result, before, after) in zip(REFUSED, outcomes):
        assert not result.successful, (name, value)
        assert reason in result.reason, (name, value, result.reason)
        assert after == before, name


def test_descriptors_carry_ranges_and_the_read_only_flag(live):
    _, params = live()
    execute = params.describe("execute_horizon")
    step = params.describe("max_joint_step")
    model = params.describe("model")
    lead = params.describe("request_lead_s")
    limits = params.describe("joint_limits.joint1.max_velocity")
    assert not execute.read_only
    assert (execute.integer_range[0].from_value, execute.integer_range[0].to_value) == (0, 1000)
    assert (step.floating_point_range[0].from_value, step.floating_point_range[0].to_value) == (
        0.001,
        10.0,
    )
    assert model.read_only and "one of ['pi05', 'pi0', 'groot']" in model.additional_constraints
    assert lead.dynamic_typing and not lead.read_only
    assert not limits.read_only


# ---------------------------------------------------------------- at start


def _start(context, **overrides: Any) -> Any:
    from relay_ros.node.policy_node import PolicyNode
    from relay_ros.paths import config_dir

    values = {"policy_url": "ws://127.0.0.1:9/{model}", **overrides}
    return PolicyNode(
        "policy_node_start",
        context=context,
        cli_args=["--ros-args", "--params-file", str(config_dir() / "pi05.yaml")],
        parameter_overrides=[Parameter(k, value=v) for k, v in values.items()],
    )


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("max_joint_step", 1, "parameter 'max_joint_step' is 1 (int); expected a double"),
        ("execute_horizon", -5, "parameter 'execute_horizon' is -5; expected an integer from 0"),
        ("model", "not_a_model", "parameter 'model' is 'not_a_model'; expected one of"),
        ("request_lead_s", "soon", "parameter 'request_lead_s' is 'soon'; expected 'auto'"),
    ],
)
def test_bad_values_at_start_are_named_like_live_ones(ros_context, name, value, message):
    from relay_ros.node.param_spec import ParameterError

    with pytest.raises(ParameterError) as info:
        _start(ros_context, **{name: value})
    assert message in str(info.value)


def test_parameters_the_node_does_not_know_are_named_in_a_warning(ros_context, capfd):
    node = _start(ros_context, exceute_horizon=10, **{"outputs.wrist.topic": "x"})
    try:
        assert node.has_parameter("execute_horizon") and not node.has_parameter("exceute_horizon")
    finally:
        node.destroy_node()
    err = wait_until(lambda: (text := capfd.readouterr().err) and "ignoring" in text and text)
    assert "ignoring parameters ['exceute_horizon', 'outputs.wrist.topic']" in err
