"""NodeConfig validation: every YAML mistake gets a sentence naming it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from test_urdf_limits import UR_JOINTS, URDF

from relay_ros.node.node_config import (
    build_config,
    collect_values,
    config_from_parameters,
    validate_change,
)
from relay_ros.node.param_spec import ParameterError, flatten_parameters
from relay_ros.node.params import LIVE_PARAMETERS, PARAMETERS, parse_lead, spec_for
from relay_ros.paths import config_dir


def _flat(model: str) -> dict:
    """The parameters of a shipped config file, flattened as ROS does."""
    data = yaml.safe_load((config_dir() / f"{model}.yaml").read_text())
    return flatten_parameters(data["/**"]["ros__parameters"])


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
    for model in ("pi05", "pi0", "groot"):
        for name in _flat(model):
            assert spec_for(name) is not None, name


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
        ({"output_names": ["arm", "arm"]}, "parameter 'output_names' lists 'arm' twice"),
        ({"outputs.arm.topic": ""}, "output 'arm' needs parameter 'outputs.arm.topic'"),
        (
            {"outputs.arm.dims": None},
            "output 'arm' needs parameter 'outputs.arm.dims' for model pi05",
        ),
        (
            {
                "joint_limits.joint2.has_position_limits": None,
                "joint_limits.joint2.min_position": None,
                "joint_limits.joint2.max_position": None,
            },
            "joint 'joint2' has no position limit: no robot description was given and no "
            "parameter sets one; give joint_limits.joint2.has_position_limits: true with "
            "joint_limits.joint2.min_position and joint_limits.joint2.max_position",
        ),
        (
            {"joint_limits.joint2.max_position": None},
            "joint_limits.joint2.has_position_limits is true but "
            "joint_limits.joint2.max_position is not given",
        ),
        (
            {"joint_limits.joint2.min_position": 1.9},
            "joint_limits.joint2.min_position 1.9 and max_position 1.8 must be finite with "
            "min_position < max_position",
        ),
        (
            {"joint_limits.joint2.has_velocity_limits": None},
            "joint_limits.joint2.max_velocity is given but "
            "joint_limits.joint2.has_velocity_limits is not set; set has_velocity_limits: true",
        ),
        (
            {"joint_limits.joint2.has_velocity_limits": False},
            "joint_limits.joint2.max_velocity is given but "
            "joint_limits.joint2.has_velocity_limits is false",
        ),
        (
            {"joint_limits.joint2.max_velocity": -1.0},
            "joint_limits.joint2.max_velocity is -1.0; expected a finite number > 0",
        ),
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
            {"joint_limits.joint2.max_velocity": 2},
            "parameter 'joint_limits.joint2.max_velocity' is 2 (int); expected a double",
        ),
        (
            {"joint_limits.joint2.has_velocity_limits": "yes"},
            "parameter 'joint_limits.joint2.has_velocity_limits' is 'yes' (str); expected true",
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
    values["robot_description_topic"] = ""  # no URDF can come to give a missing limit
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
    for name in (
        "model",
        "policy_url",
        "camera_map",
        "joint_states_topic",
        "output_names",
        "robot_description",
        "robot_description_file",
    ):
        assert spec_for(name).read_only, name
    assert spec_for("outputs.arm.topic").read_only
    assert spec_for("joint_limits.joint1.max_velocity").live
    assert spec_for("joint_limits.joint1.has_position_limits").live


def test_spec_for_finds_per_output_and_per_joint_rows():
    assert spec_for("outputs.arm.dims").type == "int_array"
    assert spec_for("outputs.left.arm.topic").name == "outputs.left.arm.topic"
    assert spec_for("joint_limits.gripper_joint.max_velocity").type == "double"
    assert spec_for("joint_limits.gripper_joint.has_velocity_limits").type == "bool"
    assert spec_for("joint_limits.my.arm.joint1.min_position").type == "double"
    assert spec_for("joint_limits.gripper_joint") is None
    assert spec_for("joint_limits.gripper_joint.max_jerk") is None
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
    joints = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper_joint")
    fields = [
        "has_position_limits",
        "min_position",
        "max_position",
        "has_velocity_limits",
        "max_velocity",
        "has_acceleration_limits",
        "max_acceleration",
    ]
    assert rest[-49:] == [f"joint_limits.{j}.{f}" for j in joints for f in fields]
    assert values["joint_limits.joint1.min_position"] == -2.9
    assert values["joint_limits.joint1.max_acceleration"] is None  # not given


def test_collect_values_tolerates_a_bad_outputs_value_and_build_config_names_it():
    values = collect_values(lambda spec: {"output_names": "arm"}.get(spec.name, spec.default))
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
            "joint_limits.joint1.min_position",
            3.0,
            "joint_limits.joint1.min_position 3.0 and max_position 2.9 must be finite",
        ),
        (
            "joint_limits.joint1.max_velocity",
            1,
            "parameter 'joint_limits.joint1.max_velocity' is 1 (int); expected a double",
        ),
        (
            "joint_limits.joint1.has_velocity_limits",
            False,
            "joint_limits.joint1.max_velocity is given but joint_limits.joint1."
            "has_velocity_limits is false",
        ),
        (
            "joint_limits.elbow.max_velocity",
            1.0,
            "parameter 'joint_limits.elbow.max_velocity': no output drives",
        ),
        ("joint_limits.joint1", [-1.0, 1.0], "parameter 'joint_limits.joint1' is not a joint"),
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
    changed = validate_change(config, "joint_limits.joint2.max_position", 1.0)
    changed = validate_change(changed, "joint_limits.joint2.max_velocity", 0.5)
    assert (
        changed.joint_limits["joint2"].min_position,
        changed.joint_limits["joint2"].max_position,
    ) == (-1.8, 1.0)
    assert changed.joint_limits["joint2"].max_velocity == 0.5
    assert changed.joint_limits["joint1"] == config.joint_limits["joint1"]
    assert config.joint_limits["joint2"].max_position == 1.8  # the old one is untouched
    assert config.joint_limits["joint2"].max_velocity == 2.5
    assert changed.limit_params["joint2"].max_velocity == 0.5


def test_the_live_parameters_are_the_settings_the_streaming_core_changes_live():
    """One place says what is live (pipeline.settings.LiveSettings); the table follows it."""
    from relay_ros.node.limit_params import limit_parameter_specs
    from relay_ros.pipeline.settings import FIXED_SETTINGS, LIVE_SETTINGS

    # joint_limits and limits_problem change live through the joint_limits.<joint>.* rows.
    assert set(LIVE_PARAMETERS) == set(LIVE_SETTINGS) - {"joint_limits", "limits_problem"}
    # joint_limits is set through joint_limits.<joint>.* (every one of them live).
    assert all(spec.live for spec in limit_parameter_specs(["joint1"]))
    assert not set(LIVE_SETTINGS) & set(FIXED_SETTINGS)
    # Every setting the core reads is one or the other; output_names is behind outputs.
    fixed_rows = {"outputs" if s.name == "output_names" else s.name for s in PARAMETERS}
    assert set(FIXED_SETTINGS) - {"commanded_joints"} <= fixed_rows


# ---------------------------------------------------------------- names of earlier releases


def test_the_old_outputs_list_is_refused_with_its_new_name():
    values = _flat("pi05")
    values["outputs"] = values.pop("output_names")
    with pytest.raises(ParameterError) as info:
        config_from_parameters(values)
    assert str(info.value) == (
        "parameter 'outputs' is now 'output_names' (a list named like the outputs.<name>.* "
        "namespace breaks 'ros2 param dump'): write output_names: ['arm', 'gripper']; see "
        "docs/node.md"
    )


def test_old_joint_limit_pairs_are_refused_with_the_lines_to_write():
    values = {**_flat("pi05"), "joint_limits.joint1": [-2.9, 2.9], "joint_limits.joint2": [-1, 1]}
    with pytest.raises(ParameterError) as info:
        config_from_parameters(values)
    message = str(info.value)
    assert message.startswith(
        "parameter 'joint_limits.joint1' = [-2.9, 2.9] is the old [lower, upper] form; write "
        "joint_limits.joint1.has_position_limits: true, joint_limits.joint1.min_position: -2.9, "
        "joint_limits.joint1.max_position: 2.9 (ros2_control's names; the velocity limit comes "
        "from the URDF or joint_limits.joint1.has_velocity_limits: true with "
        "joint_limits.joint1.max_velocity); parameter 'joint_limits.joint2' = [-1, 1]"
    )
    assert "joint_limits.joint2.min_position: -1.0" in message


def test_limits_the_node_cannot_honour_are_refused():
    values = {**_flat("pi05"), "joint_limits.joint1.has_jerk_limits": True}
    with pytest.raises(ParameterError, match="checks no jerk limits"):
        config_from_parameters(values)
    # Set false, or other ros2_control fields: not declared (the node warns), no error.
    values["joint_limits.joint1.has_jerk_limits"] = False
    values["joint_limits.joint1.max_effort"] = 150.0
    assert config_from_parameters(values).joint_limits["joint1"].max_velocity == 2.5


# ---------------------------------------------------------------- the robot description


def _ur5e_values(**change):
    """A UR5e with a gripper: the arm's limits from its URDF, the gripper's from parameters."""
    values = {
        "model": "pi05",
        "state_joints": [*UR_JOINTS, "finger"],
        "output_names": ["arm", "gripper"],
        "outputs.arm.topic": "arm/joint_trajectory",
        "outputs.arm.joints": UR_JOINTS,
        "outputs.arm.dims": [0, 1, 2, 3, 4, 5],
        "outputs.gripper.topic": "gripper/joint_trajectory",
        "outputs.gripper.joints": ["finger"],
        "outputs.gripper.dims": [6],
        "robot_description_file": str(URDF / "ur5e.urdf"),
        "joint_limits.finger.has_position_limits": True,
        "joint_limits.finger.min_position": 0.0,
        "joint_limits.finger.max_position": 0.04,
        "joint_limits.finger.has_velocity_limits": True,
        "joint_limits.finger.max_velocity": 0.1,
        "joint_limits.elbow_joint.has_velocity_limits": True,
        "joint_limits.elbow_joint.max_velocity": 1.0,
    }
    values.update(change)
    return values


def test_limits_from_a_urdf_file_with_parameters_on_top():
    config = config_from_parameters(_ur5e_values())
    assert config.robot is not None and config.robot.name == "ur5e"
    assert config.joint_limits["shoulder_pan_joint"].max_velocity == math.pi
    assert config.joint_limits["elbow_joint"].max_velocity == 1.0  # the parameter wins
    assert config.joint_limits["elbow_joint"].max_position == math.pi  # the URDF's
    assert config.joint_limits["finger"].max_position == 0.04
    # A live change is combined with the same URDF; one that would leave a joint
    # without a limit is refused.
    changed = validate_change(config, "joint_limits.elbow_joint.max_velocity", 0.5)
    assert changed.joint_limits["elbow_joint"].max_velocity == 0.5
    assert changed.joint_limits["elbow_joint"].max_position == math.pi
    with pytest.raises(ParameterError, match="elbow_joint.has_velocity_limits is false"):
        validate_change(config, "joint_limits.elbow_joint.has_velocity_limits", False)


def test_the_robot_description_as_text_and_its_errors(tmp_path: Path):
    text = (URDF / "ur5e.urdf").read_text()
    config = config_from_parameters(_ur5e_values(robot_description=text, robot_description_file=""))
    assert config.joint_limits["wrist_3_joint"].source.endswith("parameter 'robot_description'")
    with pytest.raises(ParameterError, match="are both set; give the URDF one way"):
        config_from_parameters(_ur5e_values(robot_description=text))
    with pytest.raises(ParameterError, match=r"ur5e.urdf.xacro' is a xacro file, not a URDF"):
        config_from_parameters(
            _ur5e_values(robot_description_file=str(tmp_path / "ur5e.urdf.xacro"))
        )
    with pytest.raises(ParameterError, match=r"URDF file '.*nothing.urdf' cannot be read"):
        config_from_parameters(_ur5e_values(robot_description_file=str(tmp_path / "nothing.urdf")))
    broken = tmp_path / "broken.urdf"
    broken.write_text(
        '<robot name="r"><joint name="elbow_joint" type="revolute"><limit upper="x"/>'
    )
    with pytest.raises(ParameterError, match=r"broken.urdf' is not valid XML"):
        config_from_parameters(_ur5e_values(robot_description_file=str(broken)))
    # Without the URDF the arm has no limits, and the message lists the joints.
    expected = (
        "joints ['shoulder_pan_joint', 'shoulder_lift_joint', 'elbow_joint', 'wrist_1_joint', "
        "'wrist_2_joint', 'wrist_3_joint'] have no position limit: no robot description was "
        "given"
    )
    with pytest.raises(ParameterError) as info:
        config_from_parameters(_ur5e_values(robot_description_file="", robot_description_topic=""))
    assert str(info.value).startswith(expected)
    # With the robot_description topic (the default) the node starts and waits for it,
    # commanding nothing: those joints are named in limits_problem.
    waiting = config_from_parameters(_ur5e_values(robot_description_file=""))
    assert waiting.limits_problem is not None and waiting.limits_problem.startswith(expected)
    assert waiting.limits_problem.endswith(
        "the URDF on topic 'robot_description' has not come (yet)"
    )
    assert list(waiting.joint_limits) == ["finger"]


def test_a_urdf_from_the_topic_gives_the_limits_continuous_and_mimic_joints_included():
    from relay_ros.node.limit_params import describe_limits, with_robot_text

    waiting = config_from_parameters(_ur5e_values(robot_description_file=""))
    text = (URDF / "ur5e.urdf").read_text()
    config, sentence = with_robot_text(waiting, text, "/robot_description")
    assert config.limits_problem is None and set(config.joint_limits) == {*UR_JOINTS, "finger"}
    assert sentence.startswith("joint limits with the URDF of robot 'ur5e' on topic")
    assert config.joint_limits["finger"].source == "position and velocity from parameters"
    # Each joint says where its limits came from (the node logs this at start-up too).
    assert "finger (" in sentence and "; position and velocity from parameters)" in sentence
    assert describe_limits(config.joint_limits) in sentence
    # A continuous joint has no position limit but needs its velocity limit.
    wrist = (
        '<joint name="wrist_3_joint" type="continuous">',
        'lower="-6.283185307179586" upper="6.283185307179586" velocity="3.141592653589793"',
    )
    continuous = text.replace('<joint name="wrist_3_joint" type="revolute">', wrist[0])
    config, _ = with_robot_text(waiting, continuous, "/robot_description")
    assert math.isinf(config.joint_limits["wrist_3_joint"].max_position)
    assert config.joint_limits["wrist_3_joint"].max_velocity == pytest.approx(math.pi)
    head, tail = continuous.split(wrist[0])
    no_velocity = head + wrist[0] + tail.replace(wrist[1], "", 1)
    config, sentence = with_robot_text(waiting, no_velocity, "/robot_description")
    assert "wrist_3_joint" not in config.joint_limits
    assert sentence.startswith(
        "cannot command: joint 'wrist_3_joint' has no velocity limit: topic "
        "'/robot_description' gives no <limit velocity>"
    )
    # Not a URDF: nothing is commanded, and the sentence says why.
    config, sentence = with_robot_text(waiting, "<robot", "/robot_description")
    assert config.joint_limits == {} and "is not valid XML" in sentence


# ---------------------------------------------------------------- checked without a server


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"outputs.arm.dims": [0, 1, 2, 3, 4]},
            "the configuration does not fit model pi05 (action_dim 32, as its servers "
            "announce): output 'arm': 5 dims for 6 joints; expected one dim per joint",
        ),
        (
            {"outputs.arm.dims": [0, 1, 2, 3, 40, 5]},
            "the configuration does not fit model pi05 (action_dim 32, as its servers "
            "announce): output 'arm': dim 40 is outside 0..31 (action_dim 32)",
        ),
        (
            {"state_joints": [*_flat("pi05")["state_joints"], *[f"extra{i}" for i in range(26)]]},
            "the configuration does not fit model pi05 (action_dim 32, as its servers "
            "announce): state_joints has 33 joints; pi05 takes at most action_dim=32",
        ),
        (
            {"outputs.gripper.joints": ["gripperr"]},
            "parameter 'outputs.gripper.joints' lists joint 'gripperr', which is not in "
            "state_joints ['joint1', 'joint2', 'joint3', 'joint4', 'joint5', 'joint6', "
            "'gripper_joint']: every commanded joint must be one of state_joints, named as in "
            "the joint states (a typo?)",
        ),
    ],
    ids=["5 dims for 6 joints", "dim 40", "33 state joints", "output joint not a state joint"],
)
def test_layout_mistakes_are_found_without_a_server(changes, message):
    with pytest.raises(ParameterError) as info:
        config_from_parameters({**_flat("pi05"), **changes})
    assert str(info.value) == message


def test_the_gripper_typo_is_named_before_the_limits_it_lacks():
    """A wrong joint name says so, not 'no position limit' for the unknown joint."""
    values = {**_flat("pi05"), "outputs.gripper.joints": ["gripperr"]}
    with pytest.raises(ParameterError, match="not in state_joints") as info:
        config_from_parameters(values)
    assert "limit" not in str(info.value)
