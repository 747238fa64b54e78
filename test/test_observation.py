"""ObservationBuilder and reply_to_chunk: the exact wire observation per model."""

from __future__ import annotations

import numpy as np
import pytest

from relay_ros.pipeline.observation import (
    ObservationBuilder,
    ObservationError,
    ReplyError,
    reply_to_chunk,
)
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.wire.codec import packb, unpackb

PI_META = {
    "protocol": 1,
    "model": "pi05",
    "action_horizon": 50,
    "image_size": [224, 224],
    "needs_session_id": False,
    "control_hz": 50.0,
    "lora_adapters": [],
    "action_dim": 32,
    "max_cameras": 3,
    "action_space": "joint_position",
}
GROOT_META = {
    "protocol": 1,
    "model": "groot",
    "action_horizon": 16,
    "image_size": [224, 224],
    "needs_session_id": False,
    "control_hz": 30.0,
    "lora_adapters": [],
    "embodiment": "so100",
    "video_keys": ["video.front", "video.wrist"],
    "state_keys": {"state.single_arm": 5, "state.gripper": 1},
    "action_keys": ["action.single_arm", "action.gripper"],
}


PI = ServerSpec.from_metadata(PI_META, model="pi05")
GROOT = ServerSpec.from_metadata(GROOT_META, model="groot")


def spec(model, metadata):
    return ServerSpec.from_metadata(metadata, model=model)


def frame(height=480, width=640, value=100):
    return np.full((height, width, 3), value, np.uint8)


def test_pi_observation_exact():
    builder = ObservationBuilder(PI, camera_keys=["base_0_rgb", "left_wrist_0_rgb"])
    assert builder.image_size == (224, 224) and builder.state_width == 32
    state = np.arange(7, dtype=np.float64) / 10
    obs = builder.build(
        {"base_0_rgb": frame(), "left_wrist_0_rgb": frame(224, 224, 7)},
        state,
        "pick up the cube",
        session_id="s-1",
        seed=None,
    )
    assert set(obs) == {"images", "state", "prompt"}  # no session_id: not needed, no seed
    assert list(obs["images"]) == ["base_0_rgb", "left_wrist_0_rgb"]
    for image in obs["images"].values():
        assert image.shape == (224, 224, 3) and image.dtype == np.uint8
    assert (obs["images"]["base_0_rgb"][:28] == 0).all()  # 640x480 padded top and bottom
    assert (obs["images"]["left_wrist_0_rgb"] == 7).all()
    assert obs["state"].dtype == np.float32 and obs["state"].shape == (32,)
    np.testing.assert_array_equal(obs["state"][:7], state.astype(np.float32))
    assert not obs["state"][7:].any()
    assert obs["prompt"] == "pick up the cube"
    # It survives the wire codec unchanged.
    decoded = unpackb(packb(obs))
    np.testing.assert_array_equal(decoded["state"], obs["state"])
    np.testing.assert_array_equal(decoded["images"]["base_0_rgb"], obs["images"]["base_0_rgb"])


def test_optional_fields():
    meta = dict(PI_META, model="pi0", needs_session_id=True)
    builder = ObservationBuilder(spec("pi0", meta), camera_keys=["base_0_rgb"])
    obs = builder.build(
        {"base_0_rgb": frame()},
        np.zeros(6),
        "",
        session_id="episode-3",
        seed=np.int64(7),
        sampling_params={"lora": "so100"},
    )
    assert obs["session_id"] == "episode-3"
    assert obs["seed"] == 7 and type(obs["seed"]) is int
    assert obs["sampling_params"] == {"lora": "so100"}
    with pytest.raises(ObservationError) as info:
        builder.build({"base_0_rgb": frame()}, np.zeros(6), "", session_id=None, seed=None)
    assert str(info.value) == "session_id is None; the server needs a non-empty session id"
    with pytest.raises(ObservationError, match=r"^seed must be an int, got True$"):
        builder.build({"base_0_rgb": frame()}, np.zeros(6), "", session_id="s", seed=True)


def test_pi_input_errors():
    builder = ObservationBuilder(PI, camera_keys=["base_0_rgb"])
    ok = {"base_0_rgb": frame()}
    cases = [
        (
            ({}, np.zeros(6), "p"),
            "no frame for camera 'base_0_rgb'; expected frames for ['base_0_rgb']",
        ),
        (
            ({"base_0_rgb": frame(), "left_wrist_0_rgb": frame()}, np.zeros(6), "p"),
            "frame for camera 'left_wrist_0_rgb', which is not one of ['base_0_rgb']",
        ),
        ((ok, np.zeros(33), "p"), "state has 33 values; pi05 takes at most action_dim=32"),
        ((ok, np.array([0.0, np.nan]), "p"), "state [0.0, nan] contains NaN or Inf"),
        ((ok, np.zeros(6), b"p"), "prompt must be a str, got bytes"),
        (
            ({"base_0_rgb": np.zeros((3, 48, 64), np.uint8)}, np.zeros(6), "p"),
            "camera 'base_0_rgb': frame has shape (3, 48, 64) and dtype uint8; "
            "expected (H, W, 3) uint8",
        ),
    ]
    for args, message in cases:
        with pytest.raises(ObservationError) as info:
            builder.build(*args, session_id=None, seed=None)
        assert str(info.value) == message


def test_builder_config_errors():
    cases = [
        (PI, {"camera_keys": ["front"]}, "camera key 'front' is not one of"),
        (PI, {"camera_keys": []}, "camera_keys is empty"),
        (
            spec("pi05", dict(PI_META, max_cameras=1)),
            {"camera_keys": ["base_0_rgb", "left_wrist_0_rgb"]},
            r"2 cameras \['base_0_rgb', 'left_wrist_0_rgb'\] exceed max_cameras=1",
        ),
        (
            GROOT,
            {"camera_keys": ["video.front"]},
            r"GR00T embodiment 'so100' needs every video key \['video.front', 'video.wrist'\]; "
            r"no camera for \['video.wrist'\]",
        ),
    ]
    for server, kwargs, pattern in cases:
        with pytest.raises(ObservationError, match=pattern):
            ObservationBuilder(server, **kwargs)


def test_openpi_metadata_defaults():
    # An openpi server sends neither image_size nor action_dim nor model.
    builder = ObservationBuilder(spec("pi0", {"action_horizon": 10}), camera_keys=["base_0_rgb"])
    assert builder.image_size == (224, 224) and builder.state_width == 32


GROOT_KEYS = ["video.front", "video.wrist"]


def test_groot_observation_exact():
    builder = ObservationBuilder(GROOT, camera_keys=GROOT_KEYS)
    state = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.9])
    obs = builder.build(
        {"video.front": frame(), "video.wrist": frame(240, 320)},
        state,
        "fold",
        session_id=None,
        seed=3,
    )
    assert set(obs) == {"video", "state", "prompt", "seed"}
    for video in obs["video"].values():
        assert video.shape == (1, 224, 224, 3) and video.dtype == np.uint8
    assert list(obs["state"]) == ["state.single_arm", "state.gripper"]
    assert obs["state"]["state.single_arm"].shape == (1, 5)
    assert obs["state"]["state.single_arm"].dtype == np.float32
    np.testing.assert_array_equal(obs["state"]["state.gripper"], np.float32([[0.9]]))
    np.testing.assert_array_equal(obs["state"]["state.single_arm"][0], state[:5].astype(np.float32))
    with pytest.raises(ObservationError) as info:
        builder.build(
            {"video.front": frame(), "video.wrist": frame()},
            state[:5],
            "",
            session_id=None,
            seed=None,
        )
    assert str(info.value) == (
        "state has 5 values; GR00T state_keys {'state.single_arm': 5, 'state.gripper': 1} need 6"
    )


def test_accepted_by_reference_server_validation():
    from relay_ros.formats.embodiment import load_embodiment
    from relay_ros.formats.groot import validate_groot
    from relay_ros.formats.pi import validate_pi

    pi = ObservationBuilder(PI, camera_keys=["base_0_rgb", "right_wrist_0_rgb"])
    obs = unpackb(
        packb(
            pi.build(
                {"base_0_rgb": frame(), "right_wrist_0_rgb": frame()},
                np.ones(7),
                "p",
                session_id=None,
                seed=1,
            )
        )
    )
    request = validate_pi(
        obs,
        action_dim=32,
        camera_keys=("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"),
        max_cameras=3,
        needs_session_id=False,
        adapters=[],
    )
    assert request.state.shape == (32,) and request.seed == 1
    groot = ObservationBuilder(GROOT, camera_keys=GROOT_KEYS)
    obs = unpackb(
        packb(
            groot.build(
                {"video.front": frame(), "video.wrist": frame()},
                np.ones(6),
                "p",
                session_id=None,
                seed=None,
            )
        )
    )
    request = validate_groot(
        obs,
        embodiment=load_embodiment("so100"),
        needs_session_id=False,
        adapters=[],
    )
    np.testing.assert_array_equal(request.state, np.ones(6, np.float32))


def test_reply_to_chunk_pi():
    actions = np.arange(50 * 32, dtype=np.float32).reshape(50, 32)
    actions.flags.writeable = False  # as decoded from the wire
    chunk = reply_to_chunk(actions, PI)
    assert chunk.dtype == np.float32 and chunk.shape == (50, 32) and chunk.flags.writeable
    np.testing.assert_array_equal(chunk, actions)
    # A full reply map (openpi client) is unwrapped.
    full = {"actions": actions, "server_timing": {"infer_ms": 1.0}}
    np.testing.assert_array_equal(reply_to_chunk(full, PI), actions)
    with pytest.raises(ReplyError) as info:
        reply_to_chunk(actions[:, :7], PI)
    assert str(info.value) == "actions have shape (50, 7); metadata says (50, 32)"
    with pytest.raises(ReplyError, match=r"expected \(action_horizon, action_dim\)"):
        reply_to_chunk(actions[None], PI)


def test_reply_to_chunk_groot():
    arm = np.arange(16 * 5, dtype=np.float32).reshape(1, 16, 5)
    grip = np.full((1, 16, 1), -1.0, np.float32)
    reply = {"action.gripper": grip, "action.single_arm": arm}  # dict order differs
    chunk = reply_to_chunk(reply, GROOT)
    assert chunk.shape == (16, 6) and chunk.dtype == np.float32
    np.testing.assert_array_equal(chunk[:, :5], arm[0])
    np.testing.assert_array_equal(chunk[:, 5], -1.0)
    with pytest.raises(ReplyError) as info:
        reply_to_chunk({"action.single_arm": arm}, GROOT)
    assert str(info.value) == (
        "reply action groups ['action.single_arm'] do not match the expected groups "
        "['action.single_arm', 'action.gripper']"
    )
    wider = spec("groot", dict(GROOT_META, state_keys={"state.single_arm": 6, "state.gripper": 1}))
    with pytest.raises(ReplyError) as info:
        reply_to_chunk(reply, wider)
    assert str(info.value) == "action group 'action.single_arm' has width 5; expected 6"
    with pytest.raises(ReplyError, match="has 8 steps; metadata action_horizon is 16"):
        reply_to_chunk({"action.single_arm": arm[:, :8], "action.gripper": grip[:, :8]}, GROOT)


def test_error_reply_refused():
    with pytest.raises(ReplyError) as info:
        reply_to_chunk({"type": "error", "message": "Internal inference error"}, PI)
    assert str(info.value) == (
        "reply_to_chunk got a reply of type 'error' (message 'Internal inference error'), "
        "not actions; check for error replies before converting"
    )
    with pytest.raises(ReplyError, match="expected an array"):
        reply_to_chunk([[0.0]], PI)


def test_state_joints_checked_at_start_and_build():
    arm = ["a", "b", "c", "d", "e"]
    builder = ObservationBuilder(GROOT, camera_keys=GROOT_KEYS, state_joints=arm + ["jaw"])
    frames = {"video.front": frame(), "video.wrist": frame()}
    with pytest.raises(ObservationError) as info:
        builder.build(frames, np.zeros(5), "", session_id=None, seed=None)
    assert str(info.value) == (
        "state has 5 values; expected one per state joint ['a', 'b', 'c', 'd', 'e', 'jaw']"
    )
    with pytest.raises(ObservationError) as info:
        ObservationBuilder(GROOT, camera_keys=GROOT_KEYS, state_joints=arm)
    assert str(info.value) == (
        "state_joints has 5 joints ['a', 'b', 'c', 'd', 'e']; GR00T state_keys "
        "{'state.single_arm': 5, 'state.gripper': 1} need 6"
    )
    with pytest.raises(ObservationError) as info:
        ObservationBuilder(PI, camera_keys=["base_0_rgb"], state_joints=["j"] * 33)
    assert str(info.value) == "state_joints has 33 joints; pi05 takes at most action_dim=32"


def test_strided_views_at_target_size_go_on_the_wire_unchanged():
    # An rgba8 or mono8 camera already at 224x224 arrives as a strided read-only view;
    # the builder passes it through and the codec packs it correctly.
    rgba = np.arange(224 * 224 * 4, dtype=np.uint8).reshape(224, 224, 4)[:, :, :3]
    rgba.flags.writeable = False
    builder = ObservationBuilder(PI, camera_keys=["base_0_rgb"])
    obs = builder.build({"base_0_rgb": rgba}, np.zeros(3), "", session_id=None, seed=None)
    assert obs["images"]["base_0_rgb"] is rgba
    np.testing.assert_array_equal(unpackb(packb(obs))["images"]["base_0_rgb"], rgba)
