"""A node that cannot start says why in one FATAL line naming the file, and exits 2.

Real ``policy_node`` processes (as the console script runs them) with broken files: a
camera map that is not UTF-8, params files that rcl would refuse with ``RCLError: ...
Error parsing a event near line 0``, a parameter with a bad value. The whole output
is that one line: no traceback, and the node never got as far as a publisher.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from relay_ros.paths import config_dir

pytestmark = pytest.mark.ros

_PI05 = config_dir() / "pi05.yaml"


def _run_policy_node(*ros_args: str) -> tuple[int, list[str]]:
    return _run_program("policy_node", *ros_args)


def _run_program(program: str, *ros_args: str) -> tuple[int, list[str]]:
    """Run a console script's entry point with ``--ros-args``: (exit code, output lines)."""
    code = f"import sys; from relay_ros.entry_points import {program}; sys.exit({program}())"
    done = subprocess.run(
        [sys.executable, "-c", code, "--ros-args", *ros_args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return done.returncode, lines


def _one_fatal_line(code: int, lines: list[str]) -> str:
    assert code == 2, lines
    assert len(lines) == 1, "\n".join(lines)
    assert lines[0].startswith("[FATAL] ") and "] [policy_node]: " in lines[0], lines[0]
    return lines[0].split("] [policy_node]: ", 1)[1]


def _pi05_with(tmp_path: Path, old: str, new: str) -> Path:
    text = _PI05.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "my_robot.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def test_a_camera_map_that_is_not_utf8_is_named_with_the_byte_and_line(tmp_path: Path) -> None:
    camera_map = tmp_path / "cameras.yaml"
    camera_map.write_bytes(b"base_0_rgb:\n  topic: /camera/caf\xe9/image_raw\n")
    code, lines = _run_policy_node(
        "--params-file",
        str(_PI05),
        "-p",
        f"camera_map:={camera_map}",
        "-p",
        "policy_url:=ws://127.0.0.1:9/{model}",
    )
    assert _one_fatal_line(code, lines) == (
        f"CameraMapError: camera map '{camera_map}' is not UTF-8 text: byte 0xe9 at line 2, "
        "column 21 (invalid continuation byte); save it as UTF-8"
    )


def test_a_params_file_with_a_yaml_error_is_named_with_the_line(tmp_path: Path) -> None:
    params = _pi05_with(tmp_path, "output_names: [arm, gripper]", "output_names: [arm, gripper")
    message = _one_fatal_line(*_run_policy_node("--params-file", str(params)))
    assert message.startswith(f"params file '{params}' is not valid YAML: line "), message
    assert "expected ',' or ']'" in message


def test_a_params_file_that_is_not_utf8_is_named_with_the_byte(tmp_path: Path) -> None:
    params = tmp_path / "latin1.yaml"
    params.write_bytes(_PI05.read_bytes().replace(b"pick up", b"pr\xeanez", 1))
    message = _one_fatal_line(*_run_policy_node("--params-file", str(params)))
    assert message.startswith(f"params file '{params}' is not UTF-8 text: byte 0xea at line "), (
        message
    )


def test_a_params_file_without_ros_parameters_is_named_with_the_line(tmp_path: Path) -> None:
    params = tmp_path / "flat.yaml"
    params.write_text("policy_node:\n  model: pi05\n", encoding="utf-8")
    assert _one_fatal_line(*_run_policy_node("--params-file", str(params))) == (
        f"params file '{params}', line 2: 'model' under /policy_node is the value 'pi05', "
        "outside 'ros__parameters'; expected a node name (or namespace) with "
        "'ros__parameters:' under it"
    )


def test_a_missing_params_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    assert _one_fatal_line(*_run_policy_node("--params-file", str(missing))) == (
        f"params file '{missing}' cannot be read: No such file or directory"
    )


def test_a_parameter_error_names_the_file_and_line_that_set_it(tmp_path: Path) -> None:
    params = _pi05_with(tmp_path, "seed: -1 ", "seed: 1.5")
    line = next(
        n for n, text in enumerate(params.read_text().splitlines(), 1) if "seed: 1.5" in text
    )
    assert _one_fatal_line(
        *_run_policy_node("--params-file", str(params), "-p", "policy_url:=ws://127.0.0.1:9/x")
    ) == (
        "ParameterError: parameter 'seed' is 1.5 (float); expected an integer "
        f"[set in {params}, line {line}]"
    )


def test_a_required_parameter_says_which_params_files_were_read(tmp_path: Path) -> None:
    params = tmp_path / "empty.yaml"
    params.write_text("/**:\n  ros__parameters:\n    model: pi05\n", encoding="utf-8")
    message = _one_fatal_line(*_run_policy_node("--params-file", str(params)))
    assert message.startswith("ParameterError: parameter 'state_joints' is required"), message
    assert message.endswith(f"[not set in params file '{params}']")


def test_a_value_rcl_would_ignore_is_refused_with_its_expected_type() -> None:
    """``seed: -1`` in the params file, then ``-p seed:=abc``: rcl keeps the integer and
    the node used to run with seed -1 without a word."""
    line = next(n for n, text in enumerate(_PI05.read_text().splitlines(), 1) if "seed: -1" in text)
    assert _one_fatal_line(*_run_policy_node("--params-file", str(_PI05), "-p", "seed:=abc")) == (
        "parameter 'seed' is 'abc' (a string) in -p seed:=abc; expected an integer from -1 to "
        f"2147483647, but the node would get -1 (an integer) in {_PI05}, line {line} instead "
        "(rcl keeps one value of each type and rclpy reads the integer first; give the "
        "parameter one type)"
    )


@pytest.mark.parametrize(
    "program, ros_args, message",
    [
        # Refused by rclpy at declaration: one line, not a traceback.
        (
            "sim_cameras",
            ["-p", "seed:=abc"],
            "InvalidParameterTypeException: Trying to set parameter 'seed' to 'abc' of type "
            "'STRING', expecting type 'INTEGER': seed [set in -p seed:=abc]",
        ),
        (
            "sim_cameras",
            ["-p", "seed:=4", "-p", "cameras.base.width:=64", "-p", "cameras.base.width:=x"],
            "parameter 'cameras.base.width' is 'x' (a string) in -p cameras.base.width:=x; "
            "expected an integer, but the node would get 64 (an integer) in "
            "-p cameras.base.width:=64 instead (rcl keeps one value of each type and rclpy "
            "reads the integer first; give the parameter one type)",
        ),
        (
            "sim_arm",
            ["-p", "controllers:=[arm]"],
            "SimArmConfigError: parameter 'controllers' is now 'controller_names' (a list named "
            "like the controllers.<name>.* namespace breaks 'ros2 param dump'): write "
            "controller_names: ['arm'] [set in -p controllers:=[arm]]",
        ),
    ],
)
def test_the_sim_nodes_refuse_a_value_in_one_fatal_line(
    program: str, ros_args: list[str], message: str
) -> None:
    code, lines = _run_program(program, *ros_args)
    assert code == 2, lines
    assert len(lines) == 1, "\n".join(lines)
    assert lines[0].split(f"] [{program}]: ", 1)[1] == message
