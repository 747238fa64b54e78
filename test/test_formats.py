"""relay_ros.formats: layouts as data, their observations, action spaces, the server side.

ROS-free. The π and GR00T formats are pinned byte for byte by test_wire_golden.py
and tested through test_observation.py / test_outputs.py / test_server_*.py; here
the openpi layouts, which are new, from YAML to the wire and back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from relay_ros.formats import FormatError, format_for
from relay_ros.formats.action_space import (
    ActionPart,
    differentiate_positions,
    integrate_velocities,
)
from relay_ros.formats.layout import LayoutError, layout_names, load_layout
from relay_ros.formats.openpi_layout import validate_layout
from relay_ros.formats.requests import ObservationError as RequestError
from relay_ros.node.node_config import config_from_parameters
from relay_ros.node.param_spec import ParameterError
from relay_ros.pipeline.camera_map import CameraMapError, load_model_camera_map
from relay_ros.pipeline.image_encoding import ImageEncodingError, check_image_encoding
from relay_ros.pipeline.observation import ObservationBuilder, ObservationError, reply_to_chunk
from relay_ros.pipeline.server_spec import ServerSpec, ServerSpecError
from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.server.__main__ import build_parser, options_from_args
from relay_ros.server.metadata import build_metadata
from relay_ros.wire.client import PolicyClient
from relay_ros.wire.codec import packb, unpackb

DROID_CAMERAS = ["exterior_image_1_left", "wrist_image_left"]
ALOHA_CAMERAS = ["cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist"]


def frames(keys: list[str]) -> dict[str, np.ndarray]:
    return {key: np.full((240, 320, 3), 90, np.uint8) for key in keys}


def spec(layout: str, **metadata: object) -> ServerSpec:
    return ServerSpec.from_metadata(metadata, model="pi05", layout=layout)


# ---------------------------------------------------------------- layouts as data


def test_the_shipped_layouts_are_openpis_environments() -> None:
    assert layout_names() == ("aloha", "droid", "libero")
    droid = load_layout("droid")
    assert droid.camera_names == tuple(DROID_CAMERAS)
    assert [p.key for p in droid.state] == [
        ("observation/joint_position",),
        ("observation/gripper_position",),
    ]
    assert (droid.state_width, droid.action_width, droid.action_horizon) == (8, 8, 15)
    assert [(p.space, p.step_scale, p.clip) for p in droid.actions] == [
        ("joint_velocity", 0.2, 1.0),
        ("joint_position", None, None),
    ]
    aloha = load_layout("aloha")
    assert aloha.image_layout == "CHW" and aloha.cameras[0].key == ("images", "cam_high")
    assert [c.required for c in aloha.cameras] == [True, False, False, False]
    assert aloha.state_width == aloha.action_width == 14


def test_a_users_layout_is_one_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "my_arm.yaml"
    path.write_text(
        "cameras:\n"
        "  top: {key: [obs, cams, top]}\n"
        "image: {layout: HWC, size: [96, 128], dtype: float32}\n"
        "state:\n"
        "  - {key: [obs, q], width: 3, joints: [a, b, c]}\n"
        "actions: {horizon: 4, control_hz: 10, parts: [{name: q, width: 3}]}\n"
    )
    fmt = format_for("pi05", str(path))
    assert fmt.name == "layout 'my_arm'"
    server = spec(str(path))
    assert server.image_size == (96, 128) and server.action_horizon == 4
    builder = ObservationBuilder(server, camera_keys=["top"], state_joints=["a", "b", "c"])
    obs = builder.build(
        {"top": np.full((48, 64, 3), 255, np.uint8)},
        np.array([0.1, 0.2, 0.3]),
        "wave",
        session_id=None,
        seed=None,
    )
    image = obs["obs"]["cams"]["top"]
    assert image.shape == (96, 128, 3) and image.dtype == np.float32 and image.max() == 1.0
    assert obs["obs"]["q"].dtype == np.float32 and obs["prompt"] == "wave"
    with pytest.raises(ObservationError, match=r"state obs.q is joints \['a', 'b', 'c'\]"):
        ObservationBuilder(server, camera_keys=["top"], state_joints=["a", "c", "b"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cameras: {}\n", "cameras must be a non-empty map"),
        (
            "cameras: {a: x}\nimage: {size: [1, 2], layout: NHWC}\n",
            "image: layout is 'NHWC'; expected one of ['HWC', 'CHW']",
        ),
        (
            "cameras: {a: x}\nimage: {size: [1, 2]}\nstate: [{key: s, width: 0}]\n",
            "state[0]: width is 0; expected an integer >= 1",
        ),
        (
            "cameras: {a: x}\nimage: {size: [2, 2]}\nstate: [{key: s, width: 1}]\n"
            "actions: {horizon: 2, control_hz: 5, parts: [{width: 1, gain: 2}]}\n",
            "actions.parts[0]: 'gain' is not a field",
        ),
        ("cameras: {a: {key: []}}\n", "camera 'a': key is []; expected a key string or a list"),
    ],
)
def test_a_bad_layout_names_the_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(LayoutError) as info:
        load_layout(str(path))
    assert str(path) in str(info.value) and message in str(info.value)
    with pytest.raises(LayoutError, match=r"layout 'ur5' is not one of the shipped layouts"):
        load_layout("ur5")


# ---------------------------------------------------------------- observations


def test_droid_observation_is_openpis_example_and_the_server_checks_it() -> None:
    server = spec("droid")
    builder = ObservationBuilder(server, camera_keys=DROID_CAMERAS, state_joints=list("abcdefgh"))
    obs = unpackb(
        packb(builder.build(frames(DROID_CAMERAS), np.arange(8.0), "p", session_id=None, seed=1))
    )
    assert sorted(obs) == sorted(
        [
            "observation/exterior_image_1_left",
            "observation/wrist_image_left",
            "observation/joint_position",
            "observation/gripper_position",
            "prompt",
            "seed",
        ]
    )
    assert obs["observation/wrist_image_left"].shape == (224, 224, 3)
    assert obs["observation/joint_position"].dtype == np.float64
    np.testing.assert_array_equal(obs["observation/gripper_position"], [7.0])
    request = validate_layout(obs, layout=load_layout("droid"), needs_session_id=False, adapters=())
    np.testing.assert_array_equal(request.state, np.arange(8.0, dtype=np.float32))
    wrong = dict(obs, **{"observation/joint_position": obs["observation/joint_position"][:6]})
    with pytest.raises(RequestError, match=r"has shape \(6,\); expected \(7,\)"):
        validate_layout(wrong, layout=load_layout("droid"), needs_session_id=False, adapters=())


def test_aloha_frames_are_channel_first_and_cam_high_is_required() -> None:
    server = spec("aloha")
    builder = ObservationBuilder(
        server, camera_keys=ALOHA_CAMERAS, state_joints=list("abcdefghijklmn")
    )
    obs = builder.build(frames(ALOHA_CAMERAS), np.zeros(14), "p", session_id=None, seed=None)
    assert sorted(obs) == ["images", "prompt", "state"]
    assert {k: v.shape for k, v in obs["images"].items()} == {
        key: (3, 224, 224) for key in ALOHA_CAMERAS
    }
    assert obs["state"].shape == (14,) and obs["state"].dtype == np.float64
    validate_layout(obs, layout=load_layout("aloha"), needs_session_id=False, adapters=())
    with pytest.raises(ObservationError, match=r"needs cameras \['cam_high'\]"):
        ObservationBuilder(server, camera_keys=["cam_low"])


def test_layout_camera_maps_and_encodings_are_checked_at_start(tmp_path: Path) -> None:
    cameras = tmp_path / "cams.yaml"
    cameras.write_text("base_0_rgb: /cam\n")
    with pytest.raises(CameraMapError, match=r"not one of \['exterior_image_1_left'"):
        load_model_camera_map(cameras, "pi05", "droid")
    cameras.write_text("exterior_image_1_left: /cam\nwrist_image_left: /wrist\n")
    assert [e.key for e in load_model_camera_map(cameras, "pi05", "droid")] == DROID_CAMERAS
    with pytest.raises(ImageEncodingError, match="with layout 'droid': its server takes raw"):
        check_image_encoding("pi05", "jpeg", 90, "droid")


# ---------------------------------------------------------------- action spaces


def test_joint_velocities_integrate_from_the_start_inside_the_limits() -> None:
    parts = (
        ActionPart("v", 0, 2, "joint_velocity", step_scale=0.2, clip=1.0),
        ActionPart("g", 2, 1, "joint_position"),
    )
    chunk = np.array([[1.0, 3.0, 0.5], [1.0, -0.5, 0.6], [-0.5, 0.0, 0.7], [2.0, 0.0, 0.8]])
    out = integrate_velocities(chunk, parts, {0: 0.5, 1: 0.0}, dt=0.1, bounds={1: (-1.0, 0.1)})
    # Column 0: 0.5, +0.2, +0.2, -0.1 (the step of row 3 is never reached).
    np.testing.assert_allclose(out[:, 0], [0.5, 0.7, 0.9, 0.8], atol=1e-6)
    # Column 1: a clipped step of 0.2 stops at the upper limit 0.1, then -0.1.
    np.testing.assert_allclose(out[:, 1], [0.0, 0.1, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(out[:, 2], chunk[:, 2], atol=1e-6)
    # Without step_scale the values are rad/s: one step is value * dt.
    rad_s = (ActionPart("v", 0, 1, "joint_velocity"),)
    np.testing.assert_allclose(
        integrate_velocities(np.array([[1.0], [2.0], [0.0]]), rad_s, {0: 0.0}, dt=0.5)[:, 0],
        [0.0, 0.5, 1.5],
    )
    # The reference server's inverse: positions -> values that integrate back.
    plan = np.array([[0.1, 9.0], [0.15, 9.0], [0.25, 9.0]], dtype=np.float32)
    parts2 = (ActionPart("v", 0, 1, "joint_velocity", step_scale=0.2), parts[1])
    values = differentiate_positions(plan, parts2, dt=1 / 15)
    np.testing.assert_allclose(values[:, 0], [0.25, 0.5, 0.5], rtol=1e-6)
    back = integrate_velocities(values, parts2, {0: 0.1}, dt=1 / 15)
    np.testing.assert_allclose(back, plan, atol=1e-6)


def test_end_effector_actions_are_refused_at_start_with_the_reason(tmp_path: Path) -> None:
    assert format_for("pi05", "droid").unsupported_action_space() is None
    with pytest.raises(ParameterError) as info:
        config_from_parameters(
            {
                "layout": "libero",
                "state_joints": [f"j{i}" for i in range(8)],
                "output_names": ["arm"],
                "outputs.arm.topic": "arm/joint_trajectory",
                "outputs.arm.joints": ["j0"],
                "outputs.arm.dims": [0],
            }
        )
    assert str(info.value).startswith(
        "parameter 'layout' is 'libero': layout 'libero' action part 'eef_delta' is "
        "end-effector deltas"
    )
    mine = tmp_path / "mine.yaml"
    mine.write_text((Path(__file__).parents[1] / "config/layouts/aloha.yaml").read_text())
    with pytest.raises(ParameterError, match="a layout file .* needs a camera map"):
        config_from_parameters(
            {
                "layout": str(mine),
                "state_joints": ["a"],
                "output_names": ["arm"],
                "outputs.arm.topic": "arm/joint_trajectory",
                "outputs.arm.joints": ["a"],
                "outputs.arm.dims": [0],
            }
        )


# ---------------------------------------------------------------- the reference server


def test_reference_server_serves_a_layout_and_says_which() -> None:
    meta = build_metadata("pi05", layout="droid", lora_adapters=["towels"])
    assert (meta["layout"], meta["action_horizon"], meta["action_dim"]) == ("droid", 15, 8)
    with pytest.raises(
        ServerSpecError, match="server serves layout 'droid', node is set to 'aloha'"
    ):
        ServerSpec.from_metadata(meta, model="pi05", layout="aloha")
    with run_server_in_thread(ServerOptions(models=("pi05",), layout="droid")) as handle:
        client = PolicyClient("pi05", url=handle.url_template)
        try:
            server = ServerSpec.from_metadata(
                client.get_server_metadata(), model="pi05", layout="droid"
            )
            builder = ObservationBuilder(server, camera_keys=DROID_CAMERAS)
            state = np.array([0.0, 0.1, 0.0, -1.5, 0.0, 1.5, 0.0, 0.3])
            obs = builder.build(frames(DROID_CAMERAS), state, "p", session_id=None, seed=3)
            actions = client.infer(obs)
            wrong = dict(obs)
            del wrong["observation/wrist_image_left"]
            error = client.infer(wrong)
        finally:
            client.close()
    assert error == {"type": "error", "message": "Internal inference error"}
    chunk = reply_to_chunk(actions, server)
    assert chunk.shape == (15, 8)
    parts = server.format.action_parts(server)
    positions = integrate_velocities(chunk, parts, dict(enumerate(state)), dt=1 / 15)
    # The synthetic plan starts at the state and moves smoothly: integrated, the
    # velocities give positions that start there and change per step at most what a
    # velocity of 1 (DROID's clip) moves a joint: 0.2 rad (float32 rounding allowed).
    np.testing.assert_allclose(positions[0, :7], state[:7], atol=1e-6)
    assert np.abs(np.diff(positions[:, :7], axis=0)).max() <= 0.2 + 1e-5


def test_the_reference_server_moves_like_the_robot_it_is_told() -> None:
    """``--max-speed`` and ``--rest-pose`` (what ``make demo LAYOUT=droid`` passes for
    the Franka of config/droid.yaml): the flow plan's circles are centred on the rest
    pose (joint 4 stays inside its -3.07..-0.07 range instead of heading for 0) and no
    joint moves faster than its bound between two actions, once integrated."""
    args = build_parser().parse_args(
        [
            "--layout",
            "droid",
            "--model",
            "pi05",
            "--max-speed=1,0.5",
            "--rest-pose=0,0,0,-1.5708,0,1.8675,0,0.5",
        ]
    )
    options = options_from_args(args)
    assert options.max_speed == (1.0, 0.5)
    assert options.rest_pose == (0.0, 0.0, 0.0, -1.5708, 0.0, 1.8675, 0.0, 0.5)
    state = np.array([0.0, 0.1, 0.0, -1.5708, 0.0, 1.8675, 0.0, 0.5])
    with run_server_in_thread(options) as handle:
        client = PolicyClient("pi05", url=handle.url_template)
        try:
            server = ServerSpec.from_metadata(
                client.get_server_metadata(), model="pi05", layout="droid"
            )
            builder = ObservationBuilder(server, camera_keys=DROID_CAMERAS)
            obs = builder.build(frames(DROID_CAMERAS), state, "p", session_id=None, seed=3)
            actions = client.infer(obs)
        finally:
            client.close()
    chunk = reply_to_chunk(actions, server)
    positions = integrate_velocities(
        chunk, server.format.action_parts(server), dict(enumerate(state)), dt=1 / 15
    )
    steps = np.abs(np.diff(positions, axis=0)) * 15
    assert steps[:, 0].max() <= 1.0 + 1e-4 and steps[:, 1:].max() <= 0.5 + 1e-4
    assert (positions[:, 3] < -0.0698).all() and (positions[:, 5] > -0.0175).all()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--max-speed", "fast"])


def test_a_bad_layout_is_refused_by_the_server_options() -> None:
    with pytest.raises(ValueError, match="layout: layout 'ur5' is not one of the shipped"):
        ServerOptions(models=("pi05",), layout="ur5")
    with pytest.raises(FormatError):
        format_for("pi05", "/nonexistent/layout.yaml")
