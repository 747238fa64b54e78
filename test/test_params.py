"""NodeConfig validation: every YAML mistake gets a sentence naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from relay_ros.node.params import PARAMETERS, ParameterError, build_config, parse_lead
from relay_ros.paths import config_dir


def _flat(model: str) -> dict:
    """The parameters of a shipped config file, flattened as ROS does."""
    data = yaml.safe_load((config_dir() / f"{model}.yaml").read_text())
    return dict(data["/**"]["ros__parameters"])


@pytest.mark.parametrize("model", ["pi05", "pi0", "groot"])
def test_shipped_configs_are_valid(model):
    config = build_config(_flat(model))
    assert config.model == model
    assert config.camera_map == config_dir() / f"{model}_cameras.yaml"
    assert config.commanded_joints[-1] == "gripper_joint"
    assert set(config.joint_limits) == set(config.commanded_joints)
    assert config.limits_mode == "refuse"
    assert config.request_lead_s is None  # auto
    assert config.seed is None


def test_shipped_configs_declare_only_known_parameters():
    known = {spec.name for spec in PARAMETERS}
    for model in ("pi05", "pi0", "groot"):
        for name in _flat(model):
            assert name in known or name.split(".")[0] in ("outputs", "joint_limits"), name


def test_defaults_apply_when_unset():
    values = _flat("pi05")
    for name in ("max_joint_step", "sensor_timeout_s", "tick_hz", "control_hz", "request_lead_s"):
        values.pop(name, None)
    config = build_config(values)
    assert config.max_joint_step == 0.25
    assert config.sensor_timeout_s == 0.5
    assert config.tick_hz == 100.0
    assert config.control_hz is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model": "pi1"}, "parameter 'model' is 'pi1'; expected one of ['pi05', 'pi0', 'groot']"),
        ({"state_joints": []}, "parameter 'state_joints' is required"),
        ({"outputs": ["arm", "arm"]}, "parameter 'outputs' lists 'arm' twice"),
        ({"outputs.arm.topic": ""}, "output 'arm' needs parameter 'outputs.arm.topic'"),
        (
            {"outputs.arm.dims": None},
            "output 'arm' needs parameter 'outputs.arm.dims' for model pi05",
        ),
        (
            {"joint_limits.joint2": None},
            "joints ['joint2'] have no 'joint_limits.<joint>' parameter",
        ),
        (
            {"joint_limits.joint2": [1.0]},
            "parameter 'joint_limits.joint2' is [1.0]; expected [lower, upper]",
        ),
        ({"joint_limits.joint2": [1.0, -1.0]}, "expected finite lower < upper"),
        (
            {"limits_mode": "ignore"},
            "parameter 'limits_mode' is 'ignore'; expected one of ['refuse', 'clamp']",
        ),
        ({"request_mode": "eager"}, "parameter 'request_mode' is 'eager'"),
        ({"max_joint_step": 0.0}, "parameter 'max_joint_step' must be a positive number, got 0.0"),
        ({"sensor_timeout_s": -1.0}, "parameter 'sensor_timeout_s' must be a positive number"),
        ({"execute_horizon": -3}, "parameter 'execute_horizon' must be >= 1"),
        ({"blend_steps": -1}, "parameter 'blend_steps' must be >= 0, got -1"),
        ({"retry_delay_s": -0.5}, "parameter 'retry_delay_s' must be >= 0 seconds, got -0.5"),
        (
            {"outputs.gripper.joints": ["joint1"]},
            "parameter 'outputs.*.joints' lists 'joint1' twice",
        ),
    ],
)
def test_bad_values_are_named(change, message):
    values = _flat("pi05")
    values.update(change)
    with pytest.raises(ParameterError) as info:
        build_config(values)
    assert message in str(info.value)


def test_groot_outputs_need_action_key():
    values = _flat("groot")
    values["outputs.arm.action_key"] = ""
    with pytest.raises(
        ParameterError, match="needs parameter 'outputs.arm.action_key' for model groot"
    ):
        build_config(values)


def test_explicit_values(tmp_path: Path):
    values = _flat("pi05")
    values.update(
        {
            "camera_map": str(tmp_path / "m.yaml"),
            "seed": 7,
            "request_lead_s": "0.15",
            "control_hz": 15.0,
        }
    )
    config = build_config(values)
    assert config.camera_map == tmp_path / "m.yaml"
    assert config.seed == 7
    assert config.request_lead_s == pytest.approx(0.15)
    assert config.control_hz == 15.0


@pytest.mark.parametrize(
    "text, lead", [("auto", None), ("AUTO", None), ("0.2", 0.2), (0.1, 0.1), ("0", 0.0)]
)
def test_parse_lead(text, lead):
    assert parse_lead(text) == lead


@pytest.mark.parametrize("text", ["soon", "-0.1", "nan"])
def test_parse_lead_rejects(text):
    with pytest.raises(ParameterError, match="request_lead_s"):
        parse_lead(text)
