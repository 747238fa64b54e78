"""NodeConfig validation: every YAML mistake gets a sentence naming it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from relay_ros.node.params import (
    LIVE_PARAMETERS,
    PARAMETERS,
    ParameterError,
    build_config,
    collect_values,
    config_from_parameters,
    parse_lead,
    spec_for,
    validate_change,
)
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
        (
            {"max_joint_step": 0.0},
            "parameter 'max_joint_step' is 0.0; expected a number from 0.001 to 10.0",
        ),
        ({"sensor_timeout_s": -1.0}, "parameter 'sensor_timeout_s' is -1.0; expected a number"),
        (
            {"execute_horizon": -3},
            "parameter 'execute_horizon' is -3; expected an integer from 0 to 1000",
        ),
        ({"blend_steps": -1}, "parameter 'blend_steps' is -1; expected an integer from 0 to 1000"),
        (
            {"retry_delay_s": -0.5},
            "parameter 'retry_delay_s' is -0.5; expected a number from 0.0 to 60.0",
        ),
        ({"seed": -2}, "parameter 'seed' is -2; expected an integer from -1 to 2147483647"),
        ({"tick_hz": math.inf}, "parameter 'tick_hz' is inf; expected a number from 1.0"),
        (
            {"max_joint_step": 1},
            "parameter 'max_joint_step' is 1 (int); expected a double (with a decimal point, "
            "e.g. 1.0)",
        ),
        ({"dry_run": "yes"}, "parameter 'dry_run' is 'yes' (str); expected true or false"),
        (
            {"execute_horizon": 2.5},
            "parameter 'execute_horizon' is 2.5 (float); expected an integer",
        ),
        (
            {"joint_limits.joint2": [-1, 1]},
            "parameter 'joint_limits.joint2' is [-1, 1] (list); expected a list of doubles",
        ),
        (
            {"policy_url": "http://host:8000"},
            "parameter 'policy_url' is 'http://host:8000'; expected a ws:// or wss:// URL",
        ),
        (
            {"joint_states_topic": "joint states"},
            "parameter 'joint_states_topic' is 'joint states'; expected a topic name",
        ),
        ({"outputs.arm.dims": [0, "1"]}, "parameter 'outputs.arm.dims' is [0, '1'] (list)"),
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


@pytest.mark.parametrize("text", ["soon", "-0.1", "nan", "11"])
def test_parse_lead_rejects(text):
    with pytest.raises(ParameterError, match="request_lead_s"):
        parse_lead(text)


# ---------------------------------------------------------------- the table itself


def test_every_numeric_parameter_has_a_range_and_every_row_a_description():
    for spec in PARAMETERS:
        assert spec.description.endswith("."), spec.name
        if spec.type in ("int", "double"):
            assert spec.has_range, spec.name
        if spec.default is not None:
            spec.check(spec.default)  # every default passes its own validator


def test_the_live_parameters_are_the_ones_safe_to_change_while_running():
    required_live = {
        "dry_run",
        "prompt",
        "seed",
        "execute_horizon",
        "request_lead_s",
        "blend_steps",
        "limits_mode",
        "max_joint_step",
        "sensor_timeout_s",
    }
    assert required_live <= set(LIVE_PARAMETERS)
    # Everything that shapes subscriptions, publishers, the connection or timers is
    # read at start only.
    for name in ("model", "policy_url", "camera_map", "joint_states_topic", "outputs"):
        assert spec_for(name).read_only, name
    assert spec_for("outputs.arm.topic").read_only
    assert spec_for("joint_limits.joint1").live


def test_spec_for_finds_per_output_and_per_joint_rows():
    assert spec_for("outputs.arm.dims").type == "int_array"
    assert spec_for("outputs.left.arm.topic").name == "outputs.left.arm.topic"
    assert spec_for("joint_limits.gripper_joint").type == "double_array"
    assert spec_for("outputs.arm.colour") is None
    assert spec_for("use_sim_time") is None


def test_collect_values_asks_in_declaration_order_following_outputs_and_joints():
    given = _flat("pi05")
    asked = []

    def lookup(spec):
        asked.append(spec.name)
        return given.get(spec.name, spec.default)

    values = collect_values(lookup)
    assert asked[: len(PARAMETERS)] == [spec.name for spec in PARAMETERS]
    rest = asked[len(PARAMETERS) :]
    assert rest[:4] == [
        "outputs.arm.topic",
        "outputs.arm.joints",
        "outputs.arm.dims",
        "outputs.arm.action_key",
    ]
    assert rest[-7:] == [
        f"joint_limits.{j}"
        for j in ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper_joint")
    ]
    assert values["joint_limits.joint1"] == [-2.9, 2.9]


def test_collect_values_tolerates_a_bad_outputs_value_and_build_config_names_it():
    values = collect_values(lambda spec: {"outputs": "arm"}.get(spec.name, spec.default))
    assert "outputs.arm.topic" not in values
    with pytest.raises(ParameterError, match="parameter 'state_joints' is required"):
        build_config(values)


def test_config_from_parameters_is_what_the_node_would_build():
    config = config_from_parameters({**_flat("groot"), "seed": 3})
    assert config == build_config(
        collect_values(lambda spec: {**_flat("groot"), "seed": 3}.get(spec.name, spec.default))
    )
    assert config.seed == 3
    assert config.outputs[1].action_key == "action.gripper"


# ---------------------------------------------------------------- live changes


@pytest.fixture
def config():
    return build_config(_flat("pi05"))


@pytest.mark.parametrize(
    "name, value, field, expected",
    [
        ("dry_run", True, "dry_run", True),
        ("prompt", "fold the towel", "prompt", "fold the towel"),
        ("seed", 5, "seed", 5),
        ("seed", -1, "seed", None),
        ("execute_horizon", 10, "execute_horizon", 10),
        ("execute_horizon", 0, "execute_horizon", None),
        ("request_lead_s", "0.2", "request_lead_s", 0.2),
        ("request_lead_s", 0.3, "request_lead_s", 0.3),
        ("request_lead_s", "auto", "request_lead_s", None),
        ("blend_steps", 4, "blend_steps", 4),
        ("limits_mode", "clamp", "limits_mode", "clamp"),
        ("max_joint_step", 0.5, "max_joint_step", 0.5),
        ("sensor_timeout_s", 1.5, "sensor_timeout_s", 1.5),
        ("retry_delay_s", 0.0, "retry_delay_s", 0.0),
        ("request_mode", "sync", "request_mode", "sync"),
    ],
)
def test_validate_change_applies_live_values(config, name, value, field, expected):
    changed = validate_change(config, name, value)
    assert getattr(changed, field) == expected
    # Only that field changed; the old configuration is untouched (frozen).
    assert changed == config.__class__(**{**config.__dict__, field: expected})
    assert getattr(config, field) == getattr(build_config(_flat("pi05")), field)


@pytest.mark.parametrize(
    "name, value, message",
    [
        (
            "execute_horizon",
            -5,
            "parameter 'execute_horizon' is -5; expected an integer from 0 to 1000",
        ),
        ("limits_mode", "ignore", "parameter 'limits_mode' is 'ignore'; expected one of"),
        ("request_lead_s", "soon", "parameter 'request_lead_s' is 'soon'; expected 'auto'"),
        ("max_joint_step", 0.0, "parameter 'max_joint_step' is 0.0; expected a number from"),
        ("dry_run", 1, "parameter 'dry_run' is 1 (int); expected true or false"),
        ("model", "not_a_model", "parameter 'model' is read-only: it is read at start only"),
        ("outputs.arm.topic", "/x", "parameter 'outputs.arm.topic' is read-only"),
        (
            "joint_limits.joint1",
            [1.0, -1.0],
            "parameter 'joint_limits.joint1' is [1.0, -1.0]; expected finite lower < upper",
        ),
        ("joint_limits.joint1", [-1, 1], "parameter 'joint_limits.joint1' is [-1, 1] (list)"),
        ("joint_limits.elbow", [-1.0, 1.0], "parameter 'joint_limits.elbow': no output drives"),
        ("request_mode", "eager", "parameter 'request_mode' is 'eager'; expected one of"),
        ("tick_hz", 50.0, "parameter 'tick_hz' is read-only"),
        ("colour", "red", "parameter 'colour' is not a policy_node parameter"),
    ],
)
def test_validate_change_refuses_with_a_reason(config, name, value, message):
    with pytest.raises(ParameterError) as info:
        validate_change(config, name, value)
    assert message in str(info.value)


def test_validate_change_uses_the_start_rules():
    """A value refused at start is refused live, with the same sentence."""
    for name, value in [("seed", -7), ("blend_steps", 5000), ("sensor_timeout_s", 0.0)]:
        values = {**_flat("pi05"), name: value}
        with pytest.raises(ParameterError) as at_start:
            build_config(values)
        with pytest.raises(ParameterError) as live:
            validate_change(build_config(_flat("pi05")), name, value)
        assert str(at_start.value) == str(live.value)


def test_validate_change_of_one_joint_limit_keeps_the_others(config):
    changed = validate_change(config, "joint_limits.joint2", [-1.0, 1.0])
    assert changed.joint_limits["joint2"] == (-1.0, 1.0)
    assert changed.joint_limits["joint1"] == config.joint_limits["joint1"] == (-2.9, 2.9)
    assert config.joint_limits["joint2"] == (-1.8, 1.8)


def test_read_only_parameters_are_what_the_streaming_core_cannot_change_live():
    from relay_ros.pipeline.settings import FIXED_SETTINGS

    read_only = {spec.name for spec in PARAMETERS if spec.read_only}
    assert set(FIXED_SETTINGS) <= read_only
    # Read only beyond those: autostart only means something at start, and
    # thread_priority is the node's (its threads are raised once, at start).
    assert read_only - set(FIXED_SETTINGS) == {"autostart", "thread_priority"}
