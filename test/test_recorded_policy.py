"""The recorded policy and the plain-Python parts of ``relay-ros replay`` (no rclpy).

The recorded policy is served by the real reference server over a real WebSocket
on loopback and read from real fixture bags (mcap and sqlite3, generated here).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import cv2
import numpy as np
import pytest
from make_fixture_bags import (
    JOINT_NAMES,
    JOINT_TOPIC,
    START_NS,
    make_bags,
    read_joint_states,
)

from relay_ros.bag.recorded_policy import load_recorded_policy
from relay_ros.bag.replay_inputs import (
    ReplayError,
    check_joint_names,
    node_config,
    parse_param_override,
    read_bag_input,
    read_params_file,
    replay_parameters,
)
from relay_ros.bag.replay_observations import ObservationSaver
from relay_ros.bag.replay_report import HoldPeriod, JointGap, ReplayReport, overall_gap
from relay_ros.formats.embodiment import Embodiment
from relay_ros.formats.groot import GROOT
from relay_ros.node.debug_topics import frame_to_rgb
from relay_ros.node.param_spec import ParameterError
from relay_ros.paths import config_dir
from relay_ros.pipeline.observation import ObservationBuilder
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.pipeline.trajectory import TrajectoryError, read_joint_trajectory
from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.server.__main__ import build_parser, options_from_args
from relay_ros.server.metadata import build_metadata
from relay_ros.server.recorded import RecordedPolicy, RecordedPolicyError, policy_for_config
from relay_ros.sim.scene import encode_jpeg
from relay_ros.wire.client import PolicyClient

ARM = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6")


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_bags(tmp_path_factory.mktemp("recorded_fixtures"), seconds=2.0)


def _pi05_config(**overrides: Any) -> Any:
    return node_config(read_params_file(config_dir() / "pi05.yaml"), overrides)


# ---------------------------------------------------------------- the policy itself
def test_chunk_is_the_recording_at_t_plus_i_dt_in_the_output_dims() -> None:
    times = np.array([10.0, 10.1, 10.2, 10.3])
    positions = {"a": np.array([0.0, 1.0, 2.0, 3.0]), "b": np.array([5.0, np.nan, 7.0, 8.0])}
    policy = RecordedPolicy(
        times, positions, dims={"a": 2, "b": 0}, action_horizon=4, control_hz=20.0, width=4
    )
    chunk = policy.chunk(10.05)  # t + i*dt = 10.05, 10.10, 10.15, 10.20
    np.testing.assert_allclose(chunk[:, 2], [0.5, 1.0, 1.5, 2.0], atol=1e-6)
    # A sample without "b" (NaN) is skipped: 5 -> 7 between 10.0 and 10.2.
    np.testing.assert_allclose(chunk[:, 0], [5.5, 6.0, 6.5, 7.0], atol=1e-6)
    np.testing.assert_array_equal(chunk[:, [1, 3]], 0.0)  # dims no output reads
    # Outside the recording: the first/last sample holds.
    np.testing.assert_allclose(policy.chunk(11.0)[:, 2], 3.0)
    assert chunk.dtype == np.float32


def test_groot_reply_is_split_into_the_action_groups() -> None:
    times = np.array([0.0, 1.0])
    positions = {"j": np.array([0.0, 1.0]), "g": np.array([0.5, 0.5])}
    policy = RecordedPolicy(
        times,
        positions,
        dims={"j": 1, "g": 2},
        action_horizon=3,
        control_hz=10.0,
        width=3,
        wire_format=GROOT,
        embodiment=Embodiment(
            "test",
            ("video.front",),
            (("state.arm", 2), ("state.gripper", 1)),
            (("action.arm", 2), ("action.gripper", 1)),
        ),
    )
    reply = policy.infer({"observation_time": 0.5})
    groups = reply["actions"]
    assert list(groups) == ["action.arm", "action.gripper"]
    assert groups["action.arm"].shape == (1, 3, 2) and groups["action.gripper"].shape == (1, 3, 1)
    np.testing.assert_allclose(groups["action.arm"][0, :, 1], [0.5, 0.6, 0.7], atol=1e-6)
    np.testing.assert_allclose(groups["action.gripper"][0, :, 0], 0.5)


def test_bad_inputs_are_refused_with_the_reason() -> None:
    times = np.array([0.0, 1.0])
    with pytest.raises(RecordedPolicyError, match=r"joint 'x' is not recorded; recorded joints"):
        RecordedPolicy(times, {"a": times}, dims={"x": 0}, action_horizon=2, control_hz=1, width=2)
    with pytest.raises(RecordedPolicyError, match=r"joint 'a': dim 5 is outside 0\.\.1"):
        RecordedPolicy(times, {"a": times}, dims={"a": 5}, action_horizon=2, control_hz=1, width=2)
    policy = RecordedPolicy(
        times, {"a": times}, dims={"a": 0}, action_horizon=2, control_hz=1, width=1
    )
    with pytest.raises(RecordedPolicyError, match="observation has no 'observation_time'"):
        policy.infer({"state": np.zeros(1)})
    with pytest.raises(RecordedPolicyError, match="observation_time is 'soon'; expected seconds"):
        policy.infer({"observation_time": "soon"})


def test_policy_for_config_uses_the_node_mapping_and_server_timing(bags: dict[str, Path]) -> None:
    times, positions = read_joint_states(bags["mcap"])
    policy = policy_for_config(_pi05_config(), times, positions)
    meta = build_metadata("pi05")
    assert (policy.action_horizon, policy.control_hz) == (meta["action_horizon"], 50.0)
    assert policy.width == meta["action_dim"]
    t = times[40] + 0.003
    chunk = policy.chunk(t)
    # outputs.arm.dims [0..5] and outputs.gripper.dims [6] of config/pi05.yaml.
    for dim, joint in enumerate(JOINT_NAMES):
        expected = np.interp(t + np.arange(50) * 0.02, times, positions[joint])
        np.testing.assert_allclose(chunk[:, dim], expected, atol=1e-6)
    assert not chunk[:, 7:].any()
    # A mapping that does not fit the model's action space is refused up front: by the
    # configuration (the model's known action_dim)...
    with pytest.raises(ParameterError, match="does not fit model pi05 .*output 'gripper'"):
        _pi05_config(**{"outputs.gripper.dims": [40]})
    # ...and, for a configuration made by hand, by the recorded policy.
    config = _pi05_config()
    gripper = dataclasses.replace(config.outputs[1], dims=(40,))
    wrong = dataclasses.replace(config, outputs=(config.outputs[0], gripper))
    with pytest.raises(RecordedPolicyError, match="outputs do not fit pi05: output 'gripper'"):
        policy_for_config(wrong, times, positions)


# ---------------------------------------------------------------- over the wire
def test_reference_server_serves_it_and_the_node_builder_sends_the_time(
    bags: dict[str, Path],
) -> None:
    times, positions = read_joint_states(bags["sqlite3"])
    policy = policy_for_config(_pi05_config(), times, positions)
    with (
        run_server_in_thread(ServerOptions(models=("pi05",), policy=lambda: policy)) as server,
        PolicyClient("pi05", url=server.url("pi05"), open_timeout=10.0) as client,
    ):
        metadata = client.get_server_metadata()
        assert metadata["needs_observation_time"] is True
        builder = ObservationBuilder(
            ServerSpec.from_metadata(metadata, model="pi05"),
            camera_keys=["base_0_rgb"],
            state_joints=JOINT_NAMES,
        )
        assert builder.needs_observation_time
        frames = {"base_0_rgb": np.zeros((48, 64, 3), np.uint8)}
        t = float(times[10])
        obs = builder.build(
            frames, np.zeros(7), "p", session_id=None, seed=None, observation_time=t
        )
        assert obs["observation_time"] == t
        actions = client.infer(obs)
        np.testing.assert_array_equal(actions, policy.chunk(t))
        # Without the time the server answers with the protocol's generic error.
        del obs["observation_time"]
        assert client.infer(obs) == {"type": "error", "message": "Internal inference error"}
        # The builder refuses to build an observation without it.
        with pytest.raises(ValueError, match="observation_time is None; the server needs"):
            builder.build(frames, np.zeros(7), "p", session_id=None, seed=None)
    # A server that does not ask for it never receives it (real servers do not know it).
    spec = ServerSpec.from_metadata(build_metadata("pi05"), model="pi05")
    assert not spec.needs_observation_time
    plain = ObservationBuilder(spec, camera_keys=["base_0_rgb"])
    obs = plain.build(frames, np.zeros(7), "p", session_id=None, seed=None, observation_time=t)
    assert "observation_time" not in obs


def test_server_cli_serves_the_recorded_policy(bags: dict[str, Path], tmp_path: Path) -> None:
    params = str(config_dir() / "pi05.yaml")
    bag = str(bags["mcap"])
    args = build_parser().parse_args(
        ["--model", "pi05", "--port", "0", "--recorded-bag", bag, "--recorded-params", params]
    )
    options = options_from_args(args)
    with (
        run_server_in_thread(options) as server,
        PolicyClient("pi05", url=server.url("pi05"), open_timeout=10.0) as client,
    ):
        assert client.get_server_metadata()["needs_observation_time"] is True
    for argv, message in (
        (["--recorded-bag", bag], "--recorded-bag and --recorded-params go together"),
        (
            ["--recorded-bag", bag, "--recorded-params", params],
            "--recorded-bag serves one model: give exactly one --model",
        ),
        (
            [
                "--model",
                "pi05",
                "--recorded-bag",
                bag,
                "--recorded-params",
                params,
                "--policy",
                "m:f",
            ],
            "--recorded-bag serves the recorded policy; it cannot go with --policy",
        ),
    ):
        with pytest.raises(ValueError, match=message):
            options_from_args(build_parser().parse_args(argv))
    other = tmp_path / "other.yaml"
    other.write_text(
        re.sub(r"(joint_states_topic:\s*)\S+", r"\1/arm/joint_states", Path(params).read_text())
    )
    with pytest.raises(RecordedPolicyError, match=r"has no topic \['/arm/joint_states'\]"):
        load_recorded_policy(bag, other)
    gr00t = load_recorded_policy(bag, config_dir() / "groot.yaml")
    assert gr00t.embodiment is not None
    assert gr00t.embodiment.action_groups == (("action.single_arm", 5), ("action.gripper", 1))


# ---------------------------------------------------------------- replay inputs
def test_param_overrides_parse_like_ros() -> None:
    assert parse_param_override("seed:=3") == ("seed", 3)
    assert parse_param_override("prompt:=pick it up") == ("prompt", "pick it up")
    assert parse_param_override("state_joints:=[a, b]") == ("state_joints", ["a", "b"])
    assert parse_param_override("dry_run:=false") == ("dry_run", False)
    assert parse_param_override("camera_map:=") == ("camera_map", "")
    with pytest.raises(ReplayError, match=r"'seed=3' is not NAME:=VALUE \(e\.g\. seed:=3\)"):
        parse_param_override("seed=3")
    with pytest.raises(ReplayError, match="value is not YAML"):
        parse_param_override("state_joints:=[a, b")


def test_replay_parameters_resolve_camera_map_and_refuse_forced(tmp_path: Path) -> None:
    folder = tmp_path / "robot"
    folder.mkdir()
    params_file = folder / "robot.yaml"
    got = replay_parameters(params_file, {"camera_map": "cams.yaml"}, {"control_hz": 40})
    assert got["camera_map"] == str(folder.resolve() / "cams.yaml")
    assert got["control_hz"] == 40.0 and isinstance(got["control_hz"], float)
    assert got["dry_run"] is True and got["use_sim_time"] is True and got["autostart"] is True
    # An absolute path stays the params file's; one given on the command line is taken
    # from the working directory.
    assert "camera_map" not in replay_parameters(params_file, {"camera_map": "/abs/c.yaml"}, {})
    assert replay_parameters(params_file, {"camera_map": "c.yaml"}, {"camera_map": "d.yaml"})[
        "camera_map"
    ] == str(Path.cwd() / "d.yaml")
    typed = replay_parameters(
        params_file,
        {},
        {"joint_limits.j.max_velocity": 2, "prompt": 123, "state_joints": ["a", 7]},
    )
    assert typed["joint_limits.j.max_velocity"] == 2.0
    assert typed["prompt"] == "123" and typed["state_joints"] == ["a", "7"]
    with pytest.raises(ReplayError, match="'dry_run' cannot be overridden: .* dry_run=true"):
        replay_parameters(params_file, {}, {"dry_run": False})
    with pytest.raises(ReplayError, match="'policy_url' cannot be overridden: choose the server"):
        replay_parameters(params_file, {}, {"policy_url": "ws://x"})


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_misnamed_joints_are_named_in_one_line(bags: dict[str, Path], storage: str) -> None:
    bag = bags[storage]
    file_params = read_params_file(config_dir() / "pi05.yaml")
    given = {
        **file_params,
        "state_joints": [*ARM, "gripper"],
        "outputs.gripper.joints": ["gripper"],
        "joint_limits.gripper.has_position_limits": True,
        "joint_limits.gripper.min_position": 0.0,
        "joint_limits.gripper.max_position": 0.045,
        "joint_limits.gripper.has_velocity_limits": True,
        "joint_limits.gripper.max_velocity": 0.1,
        "joint_limits.elbow.max_velocity": 1.0,
    }
    config = node_config(given, {})
    inputs = read_bag_input(
        bag, {JOINT_TOPIC: "sensor_msgs/msg/JointState"}, config.joint_states_topic
    )
    with pytest.raises(ReplayError) as info:
        check_joint_names(bag, config, given, inputs, JOINT_TOPIC)
    assert str(info.value) == (
        f"bag '{bag}' records no joint 'gripper' (state_joints, outputs.gripper.joints, "
        "joint_limits.gripper.*), 'elbow' (joint_limits.elbow.*) on /joint_states; its joints are "
        f"{list(JOINT_NAMES)}"
    )
    # The shipped configuration names only recorded joints; unconfigured ones are ignored.
    check_joint_names(bag, _pi05_config(), file_params, inputs, JOINT_TOPIC)


# ---------------------------------------------------------------- report parts
def _report(**fields: Any) -> ReplayReport:
    base: dict[str, Any] = dict(
        bag=Path("b"),
        output=Path("o"),
        model="pi05",
        url="u",
        seed=0,
        rate=1.0,
        bag_start_ns=START_NS,
        duration_s=6.0,
        played={},
        bag_topics={},
        recorded={},
        preview_topic="/p",
        dt=0.02,
        policy="recorded",
    )
    base.update(fields)
    return ReplayReport(**base)


def test_exit_status_reasons_and_headline() -> None:
    empty = _report(hold_periods=[HoldPeriod("joint states: missing", 0.0, None)])
    assert empty.failures(allow_refusals=True) == [
        "nothing was commanded (0 chunks); see the holds in the report"
    ]
    assert empty.headline() == (
        "bridge timing error (recorded policy; 0 = a perfect bridge): nothing commanded, "
        "held 6.00 s of 6.00 s"
    )
    chunk = SimpleNamespace(stamp=0.0)
    gaps = {"a": JointGap("a", 0.01, 0.02, 10), "b": JointGap("b", 0.04, 0.1, 30)}
    refusals = {
        "first point moves joint 'j' by #": 2,
        "malformed reply: x": 1,
        "stale observation: stale input: \"camera 'a'\" is # s old": 4,
        "camera 'a' on /t: bad encoding": 1,
    }
    refused = _report(chunks=[chunk], refusals=refusals, gaps=gaps)
    assert (refused.refusal_count, refused.chunk_refusal_count) == (8, 3)
    assert refused.failures() == [
        "3 chunk(s) refused; see the report (--allow-refusals accepts them)"
    ]
    assert "refusals: 8 (3 chunk(s), 5 input(s))" in refused.format()
    # Refused inputs (a camera dropout in the recording) alone pass.
    assert _report(chunks=[chunk], refusals={"stale observation: x": 2}).failures() == []
    assert refused.failures(allow_refusals=True) == []
    assert refused.headline().endswith(
        "mean |commanded - recorded| 0.0325, max 0.1000 (b) over 40 points; held 0.00 s of 6.00 s"
    )
    assert overall_gap([JointGap("a", float("nan"), float("nan"), 0)]) is None
    assert (
        _report(policy="synthetic", chunks=[chunk])
        .headline()
        .startswith("commanded vs recorded (synthetic policy")
    )


def test_read_joint_trajectory_duck_typed() -> None:
    def t(s: float) -> SimpleNamespace:
        return SimpleNamespace(sec=int(s), nanosec=round((s - int(s)) * 1e9))

    msg = SimpleNamespace(
        header=SimpleNamespace(stamp=t(100.5), frame_id="t_obs=100.25"),
        joint_names=["a", "b"],
        points=[
            SimpleNamespace(time_from_start=t(0.1), positions=[1.0, 2.0], velocities=[]),
            SimpleNamespace(time_from_start=t(0.2), positions=[3.0, 4.0], velocities=[0.5, 0]),
        ],
    )
    data = read_joint_trajectory(msg)
    assert (data.stamp, data.t_obs, data.joint_names) == (100.5, 100.25, ("a", "b"))
    np.testing.assert_allclose(data.times, [100.6, 100.7])
    np.testing.assert_array_equal(data.position_array(), [[1.0, 2.0], [3.0, 4.0]])
    assert data.velocities == ((), (0.5, 0.0))
    msg.points[1].positions = [3.0]
    msg.header.frame_id = "base_link"
    ragged = read_joint_trajectory(msg)
    assert ragged.t_obs is None and ragged.positions[1] == (3.0,)
    with pytest.raises(TrajectoryError, match="point 1 has 1 positions for 2 joint_names"):
        ragged.position_array()


# ---------------------------------------------------------------- saved observations
def test_saved_observations_are_true_colour_pngs_and_named_state(tmp_path: Path) -> None:
    red = np.zeros((8, 10, 3), np.uint8)
    red[..., 0] = 255  # RGB red
    saver = ObservationSaver(tmp_path / "obs", ["j1", "j2"], bag_start_s=100.0)
    saver(
        "pi05",
        {
            "images": {"base_0_rgb": red, "left_wrist_0_rgb": encode_jpeg(red)},
            "state": np.array([0.5, -0.5, 0.0], np.float32),
            "prompt": "go",
            "observation_time": 101.25,
        },
    )
    saver(
        "groot",
        {
            "video": {"ego_view": red[None]},
            "state": {"state.arm": np.array([[1.0]]), "state.gripper": np.array([[2.0]])},
            "prompt": "go",
        },
    )
    saver.close()
    assert saver.saved == 2 and not saver.errors
    names = sorted(p.name for p in (tmp_path / "obs").iterdir())
    assert names == [
        "0001_base_0_rgb.png",
        "0001_left_wrist_0_rgb.png",
        "0001_state.json",
        "0002_ego_view.png",
        "0002_state.json",
    ]
    png = cv2.imread(str(tmp_path / "obs" / "0001_base_0_rgb.png"))  # BGR on read
    assert png.shape == (8, 10, 3) and (png[..., 2] == 255).all() and not png[..., :2].any()
    jpeg = cv2.imread(str(tmp_path / "obs" / "0001_left_wrist_0_rgb.png"))
    assert jpeg[..., 2].min() > 200 and jpeg[..., :2].max() < 60
    first = json.loads((tmp_path / "obs" / "0001_state.json").read_text())
    assert first["state_joints"] == {"j1": 0.5, "j2": -0.5}
    assert first["state"] == [0.5, -0.5, 0.0] and first["observation_time_s"] == 1.25
    second = json.loads((tmp_path / "obs" / "0002_state.json").read_text())
    assert second["state"] == {"state.arm": [1.0], "state.gripper": [2.0]}
    assert second["state_joints"] == {"j1": 1.0, "j2": 2.0}
    with pytest.raises(ValueError, match="exists and is not empty; files are never overwritten"):
        ObservationSaver(tmp_path / "obs", [], 0.0)
    np.testing.assert_array_equal(frame_to_rgb(np.ones((2, 2, 3), np.float32)), 255)
