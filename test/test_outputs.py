"""Output controllers: action dims / GR00T groups to trajectory controllers, validation."""

from __future__ import annotations

import pytest

from relay_ros.pipeline.outputs import OutputController, OutputsError, load_outputs
from relay_ros.pipeline.server_spec import ServerSpec

PI_META = {"model": "pi05", "action_horizon": 50, "action_dim": 32, "max_cameras": 3}
GROOT_META = {
    "model": "groot",
    "action_horizon": 16,
    "state_keys": {"state.single_arm": 5, "state.gripper": 1},
    "action_keys": ["action.single_arm", "action.gripper"],
    "video_keys": ["video.front", "video.wrist"],
}
ARM = [f"joint{i}" for i in range(1, 7)]
PI_SPEC = {
    "arm": {"topic": "/arm_controller/joint_trajectory", "joints": ARM, "dims": [0, 1, 2, 3, 4, 5]},
    "gripper": {
        "topic": "/gripper_controller/joint_trajectory",
        "joints": ["gripper_joint"],
        "dims": [6],
    },
}
SO100 = ["pan", "lift", "elbow", "flex", "roll"]
PI = ServerSpec.from_metadata(PI_META, model="pi05")
GROOT = ServerSpec.from_metadata(GROOT_META, model="groot")


def test_pi_outputs():
    outputs = load_outputs(PI_SPEC, PI)
    assert outputs == [
        OutputController("arm", "/arm_controller/joint_trajectory", tuple(ARM), (0, 1, 2, 3, 4, 5)),
        OutputController(
            "gripper", "/gripper_controller/joint_trajectory", ("gripper_joint",), (6,)
        ),
    ]
    assert PI.chunk_width == 32


def test_pi_dims_in_any_order():
    spec = {"arm": {"topic": "/a", "joints": ["b", "a"], "dims": [9, 3]}}
    (arm,) = load_outputs(spec, PI)
    assert arm.dims == (9, 3)


def test_groot_outputs_compute_flat_dims():
    spec = {
        "gripper": {
            "topic": "/gripper/joint_trajectory",
            "joints": ["jaw"],
            "action_key": "action.gripper",
        },
        "arm": {
            "topic": "/arm/joint_trajectory",
            "joints": SO100,
            "action_key": "action.single_arm",
        },
    }
    gripper, arm = load_outputs(spec, GROOT)
    assert gripper.dims == (5,) and arm.dims == (0, 1, 2, 3, 4)
    assert GROOT.chunk_width == 6
    # Part of a group, reordered.
    spec = {
        "wrist": {
            "topic": "/wrist/joint_trajectory",
            "joints": ["roll", "flex"],
            "action_key": "action.single_arm",
            "dims": [4, 3],
        }
    }
    (wrist,) = load_outputs(spec, GROOT)
    assert wrist.dims == (4, 3)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "outputs is empty; expected at least one controller"),
        (
            {"arm": {"topic": "/a", "joints": ["a", "b"], "dims": [0]}},
            "output 'arm': 1 dims for 2 joints; expected one dim per joint",
        ),
        (
            {"arm": {"topic": "/a", "joints": ["a"], "dims": [32]}},
            "output 'arm': dim 32 is outside 0..31 (action_dim 32)",
        ),
        (
            {"arm": {"topic": "/a", "joints": ["a"], "dims": [-1]}},
            "output 'arm': dim -1 is outside 0..31 (action_dim 32)",
        ),
        (
            {"arm": {"topic": "/a", "joints": ["a"]}},
            "output 'arm': missing dims (indices into the 32 action dims)",
        ),
        (
            {
                "arm": {"topic": "/a", "joints": ["a", "b"], "dims": [0, 1]},
                "grip": {"topic": "/g", "joints": ["g"], "dims": [1]},
            },
            "output 'grip': action dim 1 is already used by 'arm'",
        ),
        (
            {"arm": {"topic": "/a", "joints": ["a", "b"], "dims": [0, 0]}},
            "output 'arm': action dim 0 is already used by this output",
        ),
        (
            {
                "arm": {"topic": "/a", "joints": ["a", "b"], "dims": [0, 1]},
                "grip": {"topic": "/g", "joints": ["b"], "dims": [2]},
            },
            "output 'grip': joint 'b' is already driven by 'arm'",
        ),
        (
            {
                "arm": {"topic": "/a", "joints": ["a"], "dims": [0]},
                "grip": {"topic": "/a", "joints": ["g"], "dims": [1]},
            },
            "output 'grip': topic '/a' is already used by 'arm'",
        ),
        (
            {"arm": {"topic": "", "joints": ["a"], "dims": [0]}},
            "output 'arm': topic must be a non-empty string, got ''",
        ),
        (
            {"arm": {"topic": "/a", "joints": "a", "dims": [0]}},
            "output 'arm': joints must be a non-empty list of names, got 'a'",
        ),
        (
            {"arm": {"topic": "/a", "joints": ["a"], "dims": [0.5]}},
            "output 'arm': dims has 0.5; expected integers",
        ),
        (
            {"arm": {"topic": "/a", "joints": ["a"], "dims": [0], "action_key": "action.x"}},
            "output 'arm': unknown field 'action_key' for pi05; "
            "expected fields: ['topic', 'joints', 'dims']",
        ),
    ],
)
def test_pi_errors(spec, message):
    with pytest.raises(OutputsError) as info:
        load_outputs(spec, PI)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"topic": "/a", "joints": ["a"], "action_key": "action.arm"},
            "output 'x': action_key 'action.arm' is not one of "
            "['action.single_arm', 'action.gripper']",
        ),
        (
            {"topic": "/a", "joints": ["a"]},
            "output 'x': action_key None is not one of ['action.single_arm', 'action.gripper']",
        ),
        (
            {"topic": "/a", "joints": SO100, "action_key": "action.gripper"},
            "output 'x': 1 dims for 5 joints; expected one dim per joint",
        ),
        (
            {"topic": "/a", "joints": ["a"], "action_key": "action.gripper", "dims": [1]},
            "output 'x': dim 1 is outside action group 'action.gripper' (width 1, dims 0..0)",
        ),
    ],
)
def test_groot_errors(entry, message):
    with pytest.raises(OutputsError) as info:
        load_outputs({"x": entry}, GROOT)
    assert str(info.value) == message


def test_openpi_server_without_action_dim():
    # An openpi server sends no action_dim: the checkpoints' 32 is assumed.
    openpi = ServerSpec.from_metadata({"action_horizon": 50}, model="pi05")
    assert len(load_outputs(PI_SPEC, openpi)) == 2
