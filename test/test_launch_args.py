"""policy.launch.py's logic (relay_ros.node.launch_args) and the launch file's shape.

`launch`/`launch_ros` are not installable here, so the launch file is checked
statically: it must declare exactly the tested arguments and delegate to the
tested function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from relay_ros.models import MODEL_IDS
from relay_ros.node.launch_args import (
    POLICY_LAUNCH_ARGUMENTS,
    parse_bool,
    policy_node_namespace,
    policy_node_parameters,
)
from relay_ros.node.node_config import config_from_parameters
from relay_ros.node.param_spec import ParameterError, flatten_parameters
from relay_ros.paths import config_dir

LAUNCH_DIR = Path(__file__).resolve().parents[1] / "launch"


def test_defaults_use_the_packaged_params_file():
    params = policy_node_parameters({arg.name: arg.default for arg in POLICY_LAUNCH_ARGUMENTS})
    assert params == [str(config_dir() / "pi05.yaml"), {"model": "pi05", "dry_run": False}]


def test_given_arguments_override_the_file(tmp_path: Path):
    camera_map = tmp_path / "cams.yaml"
    camera_map.write_text("base_0_rgb: {topic: /cam}\n")
    params_file = tmp_path / "robot.yaml"
    params_file.write_text("/**:\n  ros__parameters: {}\n")
    params = policy_node_parameters(
        {
            "model": "groot",
            "params_file": str(params_file),
            "camera_map": str(camera_map),
            "prompt": "fold the towel",
            "policy_url": "ws://127.0.0.1:8000/{model}",
            "dry_run": "true",
        }
    )
    assert params == [
        str(params_file),
        {
            "model": "groot",
            "camera_map": str(camera_map),
            "prompt": "fold the towel",
            "policy_url": "ws://127.0.0.1:8000/{model}",
            "dry_run": True,
        },
    ]


def test_relative_files_resolve_against_the_current_directory_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_cameras.yaml").write_text("base_0_rgb: {topic: cam}\n")
    (tmp_path / "robot.yaml").write_text("/**:\n  ros__parameters: {}\n")
    # A file of the same name as a shipped one: the one in the current directory wins.
    (tmp_path / "pi05_cameras.yaml").write_text("base_0_rgb: {topic: mine}\n")
    for camera_map, expected in [
        ("my_cameras.yaml", tmp_path / "my_cameras.yaml"),
        ("pi05_cameras.yaml", tmp_path / "pi05_cameras.yaml"),
        ("groot_cameras.yaml", config_dir() / "groot_cameras.yaml"),  # from config/
    ]:
        params = policy_node_parameters({"params_file": "robot.yaml", "camera_map": camera_map})
        assert params[0] == str(tmp_path / "robot.yaml")
        assert params[1]["camera_map"] == str(expected)
        assert Path(params[1]["camera_map"]).is_absolute()


def test_shipped_params_file_by_name_and_default_ignores_the_current_directory(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pi05.yaml").write_text("/**:\n  ros__parameters: {}\n")
    assert policy_node_parameters({})[0] == str(config_dir() / "pi05.yaml")
    assert policy_node_parameters({"params_file": "groot.yaml"})[0] == str(
        config_dir() / "groot.yaml"
    )


def test_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "c.yaml").write_text("base_0_rgb: {topic: cam}\n")
    assert policy_node_parameters({"camera_map": "~/c.yaml"})[1]["camera_map"] == str(
        tmp_path / "c.yaml"
    )


def test_model_picks_its_config():
    assert policy_node_parameters({"model": "groot"})[0] == str(config_dir() / "groot.yaml")


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            {"model": "pi1"},
            "launch argument 'model' is 'pi1'; expected one of ['pi05', 'pi0', 'groot']",
        ),
        (
            {"params_file": "/nonexistent/p.yaml"},
            "launch argument 'params_file': no file '/nonexistent/p.yaml'",
        ),
        (
            {"camera_map": "/nonexistent/c.yaml"},
            "launch argument 'camera_map': no file '/nonexistent/c.yaml'",
        ),
        (
            {"camera_map": "nonexistent_cameras.yaml"},
            f"launch argument 'camera_map': no file '{Path.cwd() / 'nonexistent_cameras.yaml'}' "
            f"or '{config_dir() / 'nonexistent_cameras.yaml'}'",
        ),
        ({"dry_run": "maybe"}, "launch argument 'dry_run' is 'maybe'; expected true or false"),
        ({"modle": "pi0"}, "unknown launch arguments ['modle']"),
    ],
)
def test_bad_arguments(arguments, message):
    with pytest.raises(ParameterError) as info:
        policy_node_parameters(arguments)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "text, value", [("true", True), ("True", True), ("1", True), ("false", False), ("", False)]
)
def test_parse_bool(text, value):
    assert parse_bool("x", text) is value


def _declared_names(tree: ast.AST) -> set[str]:
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_policy_launch_file_is_thin_and_delegates():
    source = (LAUNCH_DIR / "policy.launch.py").read_text()
    tree = ast.parse(source)
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "relay_ros.node.launch_args"
        for alias in node.names
    }
    assert imported == {
        "POLICY_LAUNCH_ARGUMENTS",
        "policy_node_namespace",
        "policy_node_parameters",
    }
    functions = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    assert "policy_node" in _declared_names(tree)  # the executable it starts
    assert len(source.splitlines()) < 50


def test_the_robots_urdf_is_passed_as_robot_description_file():
    params = policy_node_parameters({"robot_description_file": "sim_arm.urdf"})
    assert params[1]["robot_description_file"] == str(config_dir() / "sim_arm.urdf")
    assert "robot_description_file" not in policy_node_parameters({})[1]


def test_the_urdf_arguments_description_says_the_shipped_limits_override_it():
    """Every shipped config/<model>.yaml gives joint_limits for every commanded joint, so
    robot_description_file:=<urdf> alone changes no limit: the description must say so."""
    (argument,) = [a for a in POLICY_LAUNCH_ARGUMENTS if a.name == "robot_description_file"]
    assert "joint_limits" in argument.description and "override" in argument.description
    for model in MODEL_IDS:
        values = yaml.safe_load((config_dir() / f"{model}.yaml").read_text())["/**"][
            "ros__parameters"
        ]
        commanded = {
            joint for name in values["output_names"] for joint in values[f"outputs.{name}.joints"]
        }
        assert commanded <= set(values["joint_limits"]), model


@pytest.mark.parametrize(
    "text, namespace",
    [
        ("", ""),
        ("/", ""),
        ("robot1", "robot1"),
        ("/robot1", "/robot1"),
        ("/fleet/robot_2/", "/fleet/robot_2"),
        (" arm ", "arm"),
    ],
)
def test_the_namespace_argument(text, namespace):
    assert policy_node_namespace({"namespace": text}) == namespace
    # It is a launch argument like the others: the parameters do not change.
    assert policy_node_parameters({"namespace": text}) == policy_node_parameters({})


@pytest.mark.parametrize("text, token", [("2robot", "2robot"), ("/a/b-c", "b-c"), ("a//b", "")])
def test_a_bad_namespace_names_the_token(text, token):
    with pytest.raises(ParameterError) as info:
        policy_node_namespace({"namespace": text})
    assert str(info.value) == (
        f"launch argument 'namespace' is {text!r}; {token!r} is not a ROS name token (a letter "
        "or '_', then letters, digits or '_'), e.g. namespace:=robot1"
    )


def test_autostart_is_passed_only_when_given():
    assert "autostart" not in policy_node_parameters({})[1]
    assert policy_node_parameters({"autostart": "false"})[1]["autostart"] is False
    with pytest.raises(ParameterError, match="launch argument 'autostart' is 'later'"):
        policy_node_parameters({"autostart": "later"})


def test_a_shipped_layout_runs_its_config_pair_unless_a_params_file_is_given():
    params = policy_node_parameters({"layout": "droid"})
    assert params == [
        str(config_dir() / "droid.yaml"),
        {"model": "pi05", "layout": "droid", "dry_run": False},
    ]
    params = policy_node_parameters({"layout": "aloha", "params_file": "pi05.yaml"})
    assert params[0] == str(config_dir() / "pi05.yaml") and params[1]["layout"] == "aloha"
    assert "layout" not in policy_node_parameters({})[1]


def test_a_layout_file_is_passed_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_layout.yaml").write_text("name: mine\n")
    params = policy_node_parameters({"layout": "my_layout.yaml"})
    assert params[0] == str(config_dir() / "pi05.yaml")  # a file has no config pair
    assert params[1]["layout"] == str(tmp_path / "my_layout.yaml")
    # A file name of the package's config/layouts/ is found there.
    shipped = policy_node_parameters({"layout": "droid.yaml"})[1]["layout"]
    assert shipped == str(config_dir() / "layouts" / "droid.yaml")


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "droidd",
            "launch argument 'layout' is 'droidd'; expected a shipped layout ['aloha', 'droid', "
            "'libero'] or a layout YAML file, e.g. layout:=droid or layout:=my_layout.yaml",
        ),
        ("/nonexistent/l.yaml", "launch argument 'layout': no file '/nonexistent/l.yaml'"),
    ],
)
def test_a_bad_layout_names_what_was_expected(text, message):
    with pytest.raises(ParameterError) as info:
        policy_node_parameters({"layout": text})
    assert str(info.value) == message


def test_lora_and_record_dir_are_passed_when_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert policy_node_parameters({"lora": "so100_towels"})[1]["lora"] == "so100_towels"
    assert policy_node_parameters({"record_dir": "data/towels"})[1]["record_dir"] == str(
        tmp_path / "data" / "towels"
    )
    assert policy_node_parameters({"record_dir": "~/ds"})[1]["record_dir"] == str(
        tmp_path / "home" / "ds"
    )
    defaults = policy_node_parameters({"lora": "", "record_dir": ""})[1]
    assert "lora" not in defaults and "record_dir" not in defaults
    with pytest.raises(ParameterError) as info:
        policy_node_parameters({"lora": "towels "})
    assert str(info.value) == (
        "launch argument 'lora' is 'towels '; expected an adapter name as the server lists "
        "it in lora_adapters, e.g. lora:=so100_towels"
    )


def test_the_node_takes_what_the_launch_passes(tmp_path):
    """The params file with the overrides on top, as launch_ros hands them to the node,
    is a configuration the node accepts (config_from_parameters: the node's rules)."""
    params_file, overrides = policy_node_parameters(
        {"layout": "droid", "lora": "so100_towels", "record_dir": str(tmp_path / "ds")}
    )
    given = yaml.safe_load(Path(params_file).read_text())["/**"]["ros__parameters"]
    config = config_from_parameters(flatten_parameters({**given, **overrides}))
    assert (config.layout, config.lora) == ("droid", "so100_towels")
    assert config.record_dir == tmp_path / "ds"
    assert config.camera_map == config_dir() / "droid_cameras.yaml"
