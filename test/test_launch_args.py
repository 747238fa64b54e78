"""policy.launch.py's logic (relay_ros.node.launch_args) and the launch file's shape.

`launch`/`launch_ros` are not installable here, so the launch file is checked
statically: it must declare exactly the tested arguments and delegate to the
tested function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from relay_ros.node.launch_args import POLICY_LAUNCH_ARGUMENTS, parse_bool, policy_node_parameters
from relay_ros.node.params import ParameterError
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
            "params_file '/nonexistent/p.yaml' does not exist",
        ),
        ({"camera_map": "/nonexistent/c.yaml"}, "camera_map '/nonexistent/c.yaml' does not exist"),
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
    assert imported == {"POLICY_LAUNCH_ARGUMENTS", "policy_node_parameters"}
    functions = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    assert "policy_node" in _declared_names(tree)  # the executable it starts
    assert len(source.splitlines()) < 50
