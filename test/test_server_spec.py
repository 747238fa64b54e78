"""ServerSpec: server metadata parsed once, with a clear error for every malformed field."""

from __future__ import annotations

import pytest

from relay_ros.formats.embodiment import load_embodiment
from relay_ros.pipeline.server_spec import ServerSpec, ServerSpecError
from relay_ros.server.metadata import build_metadata


def test_reference_pi_metadata() -> None:
    spec = ServerSpec.from_metadata(build_metadata("pi05"), model="pi05")
    assert (spec.model, spec.format.name, spec.action_horizon, spec.control_hz) == (
        "pi05",
        "pi",
        50,
        50.0,
    )
    assert spec.image_size == (224, 224) and spec.needs_session_id is False
    assert spec.camera_keys == ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    assert spec.max_cameras == 3 and not spec.all_cameras_required
    assert spec.action_dim == 32 and spec.state_width == 32 and spec.chunk_width == 32
    assert spec.state_groups == {} and spec.action_groups == {}
    assert spec.metadata["model"] == "pi05"


def test_reference_groot_metadata() -> None:
    meta = build_metadata("groot", embodiment=load_embodiment("so100"))
    spec = ServerSpec.from_metadata(meta, model="groot")
    assert spec.format.name == "groot" and spec.action_horizon == 16 and spec.control_hz == 30.0
    assert spec.camera_keys == ("video.front", "video.wrist") and spec.max_cameras == 2
    assert spec.all_cameras_required and spec.embodiment == "so100"
    assert dict(spec.state_groups) == {"state.single_arm": 5, "state.gripper": 1}
    assert dict(spec.action_groups) == {"action.single_arm": 5, "action.gripper": 1}
    assert spec.state_width == 6 and spec.chunk_width == 6 and spec.action_dim is None


def test_openpi_metadata_defaults() -> None:
    # An openpi server sends its horizon, but neither model, image_size nor action_dim.
    spec = ServerSpec.from_metadata({"action_horizon": 10}, model="pi0")
    assert spec.image_size == (224, 224) and spec.control_hz is None
    assert spec.action_dim is None and spec.state_width == 32 and spec.max_cameras == 3


GROOT = {
    "model": "groot",
    "action_horizon": 16,
    "video_keys": ["video.front"],
    "state_keys": {"state.single_arm": 5, "state.gripper": 1},
    "action_keys": ["action.single_arm", "action.gripper"],
}


@pytest.mark.parametrize(
    ("model", "metadata", "message"),
    [
        ("pi05", [1, 2], "server metadata is a list; expected a map (docs/protocol.md)"),
        ("pi1", {}, "model 'pi1' is not one of ['pi05', 'pi0', 'groot']"),
        ("pi0", {"model": "pi05"}, "server serves model 'pi05', node is set to 'pi0'"),
        ("pi05", {}, "server metadata action_horizon is None; expected a positive integer"),
        (
            "pi05",
            {"action_horizon": "50"},
            "server metadata action_horizon is '50'; expected a positive integer",
        ),
        (
            "pi05",
            {"action_horizon": 50, "control_hz": "fast"},
            "server metadata control_hz is 'fast'; expected a number of Hz",
        ),
        (
            "pi05",
            {"action_horizon": 50, "image_size": [224]},
            "server metadata image_size [224] is not [height, width]; expected two integers",
        ),
        (
            "pi05",
            {"action_horizon": 50, "image_size": [0, 224]},
            "server metadata image_size [0, 224] must be positive",
        ),
        (
            "pi05",
            {"action_horizon": 50, "action_dim": 0},
            "server metadata action_dim is 0; expected a positive integer",
        ),
        (
            "pi05",
            {"action_horizon": 50, "max_cameras": True},
            "server metadata max_cameras is True; expected a positive integer",
        ),
        (
            "groot",
            dict(GROOT, video_keys="video.front"),
            "GR00T server metadata video_keys is 'video.front'; expected a non-empty list",
        ),
        (
            "groot",
            dict(GROOT, state_keys={}),
            "GR00T server metadata state_keys is {}; expected a non-empty map key -> width",
        ),
        (
            "groot",
            dict(GROOT, state_keys={"state.single_arm": -5}),
            "server metadata state_keys['state.single_arm'] is -5; expected a positive integer",
        ),
        (
            "groot",
            dict(GROOT, action_keys=["action.eef"]),
            "width of GR00T action group 'action.eef' is unknown: no state group 'state.eef' "
            "in ['state.single_arm', 'state.gripper']",
        ),
    ],
)
def test_malformed_metadata_is_named(model: str, metadata: object, message: str) -> None:
    with pytest.raises(ServerSpecError) as info:
        ServerSpec.from_metadata(metadata, model=model)  # type: ignore[arg-type]
    assert str(info.value) == message
