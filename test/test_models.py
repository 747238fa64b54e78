"""The model registry: one entry is enough for every part of relay_ros to accept a model."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from relay_ros import models
from relay_ros.models import MODEL_IDS, ModelSpec, UnknownModelError, get_model

DROID = ModelSpec(
    "pi05_droid",
    "pi",
    "π0.5 fine-tuned on DROID (test entry)",
    camera_keys=("base_0_rgb", "left_wrist_0_rgb"),
    max_cameras=2,
    server_metadata={
        "action_horizon": 15,
        "image_size": [224, 224],
        "control_hz": 15.0,
        "action_dim": 8,
        "max_cameras": 2,
        "action_space": "joint_position",
    },
)


@pytest.fixture
def droid() -> Iterator[ModelSpec]:
    models.register_model(DROID)
    try:
        yield DROID
    finally:
        models.unregister_model(DROID.id)
    assert "pi05_droid" not in MODEL_IDS


def test_builtin_models() -> None:
    assert tuple(MODEL_IDS) == ("pi05", "pi0", "groot")
    assert MODEL_IDS == ("pi05", "pi0", "groot")
    assert [get_model(m).family for m in MODEL_IDS] == ["pi", "pi", "groot"]
    assert get_model("pi05").camera_keys == ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    with pytest.raises(UnknownModelError) as info:
        get_model("pi1")
    assert str(info.value) == "model 'pi1' is not one of ['pi05', 'pi0', 'groot']"


def test_registry_refuses_bad_entries() -> None:
    with pytest.raises(ValueError, match="model 'pi05' is registered already"):
        models.register_model(get_model("pi05"))
    with pytest.raises(ValueError, match="family '' must name a wire format"):
        ModelSpec("x", "", "")
    with pytest.raises(ValueError, match="'groot' is built in"):
        models.unregister_model("groot")


def test_the_format_is_looked_up_by_family() -> None:
    from relay_ros.formats import FormatError, format_for

    models.register_model(ModelSpec("rt2_test", "rt2", "unknown wire format"))
    models.register_model(ModelSpec("pi_bare", "pi", "π entry without camera keys"))
    try:
        with pytest.raises(FormatError, match="wire format 'rt2' is not one of"):
            format_for("rt2_test")
        # A π entry without camera keys takes the openpi three.
        keys, most = format_for("pi_bare").camera_rules(get_model("pi_bare"))
        assert keys == ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb") and most == 3
    finally:
        models.unregister_model("rt2_test")
        models.unregister_model("pi_bare")


def test_a_new_entry_is_accepted_by_env_server_params_and_demo(droid: ModelSpec) -> None:
    from relay_ros.demo.models import check_model
    from relay_ros.node.node_config import build_config
    from relay_ros.server import ServerOptions
    from relay_ros.server.metadata import build_metadata
    from relay_ros.wire.env import resolve_url

    assert "pi05_droid" in MODEL_IDS and MODEL_IDS[-1] == "pi05_droid"
    url = resolve_url("pi05_droid", environ={"WALLE_URL": "ws://host:8000/{model}"})
    assert url == "ws://host:8000/pi05_droid"
    meta = build_metadata("pi05_droid")
    assert meta["model"] == "pi05_droid" and meta["action_horizon"] == 15
    assert meta["action_dim"] == 8
    assert ServerOptions(models=("pi05_droid",)).models == ("pi05_droid",)
    assert check_model("pi05_droid") == "pi05_droid"
    config = build_config(
        {
            "model": "pi05_droid",
            "camera_map": "/tmp/droid_cameras.yaml",
            "state_joints": ["j1", "j2"],
            "output_names": ["arm"],
            "outputs.arm.topic": "/arm/joint_trajectory",
            "outputs.arm.joints": ["j1", "j2"],
            "outputs.arm.dims": [0, 1],
            **{
                f"joint_limits.{j}.{name}": value
                for j in ("j1", "j2")
                for name, value in (
                    ("has_position_limits", True),
                    ("min_position", -1.0),
                    ("max_position", 1.0),
                    ("has_velocity_limits", True),
                    ("max_velocity", 2.0),
                )
            },
        }
    )
    assert config.model == "pi05_droid"


def test_a_new_entry_is_served_and_streamed_end_to_end(droid: ModelSpec) -> None:
    from relay_ros.server import ServerOptions, run_server_in_thread
    from relay_ros.wire.client import PolicyClient

    with run_server_in_thread(ServerOptions(models=("pi05_droid",))) as server:
        client = PolicyClient("pi05_droid", url=server.url_template)
        try:
            assert client.get_server_metadata()["action_horizon"] == 15
            obs = {
                "images": {"base_0_rgb": np.zeros((224, 224, 3), np.uint8)},
                "state": np.zeros(8, np.float32),
                "prompt": "pick",
            }
            actions = client.infer(obs)
        finally:
            client.close()
    assert actions.shape == (15, 8)


def test_a_new_entry_is_accepted_by_the_node_pipeline(droid: ModelSpec, tmp_path) -> None:
    from relay_ros.pipeline.camera_map import load_model_camera_map
    from relay_ros.pipeline.observation import ObservationBuilder, reply_to_chunk
    from relay_ros.pipeline.outputs import load_outputs
    from relay_ros.pipeline.server_spec import ServerSpec
    from relay_ros.server.metadata import build_metadata

    cameras = tmp_path / "droid_cameras.yaml"
    cameras.write_text("base_0_rgb: /cam/base\nleft_wrist_0_rgb: /cam/wrist/compressed\n")
    entries = load_model_camera_map(cameras, "pi05_droid")
    spec = ServerSpec.from_metadata(build_metadata("pi05_droid"), model="pi05_droid")
    assert (spec.format.name, spec.action_horizon, spec.chunk_width, spec.max_cameras) == (
        "pi",
        15,
        8,
        2,
    )
    builder = ObservationBuilder(spec, camera_keys=[e.key for e in entries], state_joints=["a"])
    frames = {e.key: np.zeros((48, 64, 3), np.uint8) for e in entries}
    obs = builder.build(frames, np.ones(1), "pick", session_id=None, seed=None)
    assert obs["state"].shape == (8,) and set(obs["images"]) == {"base_0_rgb", "left_wrist_0_rgb"}
    outputs = load_outputs({"arm": {"topic": "/arm", "joints": ["a"], "dims": [7]}}, spec)
    assert outputs[0].dims == (7,)
    assert reply_to_chunk(np.zeros((15, 8), np.float32), spec).shape == (15, 8)
