"""Params files checked before rcl reads them, and where a parameter was set.

The checker must refuse what rcl refuses (with the file, line and problem) and
accept everything rcl accepts: the last test runs rcl itself on every sample.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from relay_ros.node.params_files import (
    CommandLineParameters,
    ParamsFileError,
    read_params_file,
    user_arguments,
)
from relay_ros.paths import config_dir

# name -> (file bytes, the error's text after "params file '<path>'", or None: accepted)
SAMPLES: dict[str, tuple[bytes, str | None]] = {
    "shipped": (b"/**:\n  ros__parameters:\n    model: pi05\n    seed: -1\n", None),
    "empty file": (b"", None),
    "byte order mark": (b"\xef\xbb\xbfpolicy_node:\n  ros__parameters:\n    a: 1\n", None),
    "nested namespace": (b"robot1:\n  policy_node:\n    ros__parameters:\n      a: 1\n", None),
    "nested parameter": (b"policy_node:\n  ros__parameters:\n    a: {b: {c: 1}}\n", None),
    "empty list": (b"policy_node:\n  ros__parameters:\n    a: []\n", None),
    "null value": (b"policy_node:\n  ros__parameters:\n    a: ~\n", None),
    "node without parameters": (b"policy_node: {}\n", None),
    "yaml error": (
        b"policy_node:\n  ros__parameters:\n    x: [1, 2\n",
        " is not valid YAML: line 4, column 1: expected ',' or ']', but got '<stream end>' "
        "(while parsing a flow sequence from line 3, column 8)",
    ),
    "tab": (
        b"policy_node:\n  ros__parameters:\n\tmodel: pi05\n",
        " is not valid YAML: line 3, column 1: found character '\\t' that cannot start any "
        "token (while scanning for the next token)",
    ),
    "latin-1": (
        b"policy_node:\n  ros__parameters:\n    prompt: caf\xe9\n",
        " is not UTF-8 text: byte 0xe9 at line 3, column 16 (invalid continuation byte); "
        "save it as UTF-8",
    ),
    "two documents": (
        b"policy_node:\n  ros__parameters:\n    a: 1\n---\nb: 1\n",
        " holds more than one YAML document (another starts at line 4, column 1); expected one",
    ),
    "a list at the top": (
        b"- a\n- b\n",
        ", line 1: the file is a list; expected '<node name>: {ros__parameters: {...}}' at "
        "the top level",
    ),
    "parameter outside ros__parameters": (
        b"policy_node:\n  model: pi05\n",
        ", line 2: 'model' under /policy_node is the value 'pi05', outside 'ros__parameters'; "
        "expected a node name (or namespace) with 'ros__parameters:' under it",
    ),
    "a value after ros__parameters": (
        b"policy_node:\n  ros__parameters:\n    a: 1\n  other: 2\n",
        ", line 4: 'other' under /policy_node is the value '2', outside 'ros__parameters'; "
        "expected a node name (or namespace) with 'ros__parameters:' under it",
    ),
    "a node that is a number": (
        b"policy_node: 5\n",
        ", line 1: 'policy_node' is the value '5', outside 'ros__parameters'; expected a "
        "node name (or namespace) with 'ros__parameters:' under it",
    ),
    "empty ros__parameters": (
        b"policy_node:\n  ros__parameters:\n",
        ", line 2: 'ros__parameters' of /policy_node is empty; expected a mapping of "
        "parameter names to values",
    ),
    "integers among doubles": (
        b"policy_node:\n  ros__parameters:\n    joint_limits.j1: [-2, 2.5]\n",
        ", line 3: parameter 'joint_limits.j1' of /policy_node mixes double and integer "
        "values; a ROS list parameter has one type (write 1.0, not 1, in a list of doubles)",
    ),
    "strings among integers": (
        b"policy_node:\n  ros__parameters:\n    dims: [0, x]\n",
        ", line 3: parameter 'dims' of /policy_node mixes integer and string values; a ROS "
        "list parameter has one type",
    ),
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_a_params_file_is_refused_with_its_name_line_and_problem(name, tmp_path: Path) -> None:
    data, problem = SAMPLES[name]
    path = tmp_path / "params.yaml"
    path.write_bytes(data)
    if problem is None:
        assert read_params_file(path).path == str(path)
        return
    with pytest.raises(ParamsFileError) as info:
        read_params_file(path)
    assert str(info.value) == f"params file '{path}'{problem}"


def test_a_missing_params_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ParamsFileError, match=r"^params file '.*nope.yaml' cannot be read: No "):
        read_params_file(tmp_path / "nope.yaml")


def test_the_settings_remember_their_node_and_line() -> None:
    settings = read_params_file(config_dir() / "pi05.yaml").settings
    seed = next(s for s in settings if s.name == "seed")
    assert seed.node == "/**"
    text = (config_dir() / "pi05.yaml").read_text().splitlines()
    assert text[seed.line - 1].strip().startswith("seed:")
    names = {s.name for s in settings}  # nested mappings joined with dots
    assert {"joint_limits.joint1.max_velocity", "outputs.arm.topic", "state_joints"} <= names


def test_user_arguments_are_those_outside_ros_args() -> None:
    argv = ["policy_node", "--help", "--ros-args", "-p", "a:=1", "--params-file", "-h", "--"]
    assert user_arguments([*argv, "-v"]) == ["policy_node", "--help", "-v"]
    # "-h" there is the params file's name, not a request for help.
    assert user_arguments(["x", "--ros-args", "--params-file", "-h"]) == ["x"]


def test_a_parameter_error_says_where_the_parameter_was_set(tmp_path: Path) -> None:
    robot = tmp_path / "robot.yaml"
    robot.write_text(
        "/**:\n  ros__parameters:\n    seed: 1.5\n"
        "other_node:\n  ros__parameters:\n    rate: 1\n"
        "arm_policy:\n  ros__parameters:\n    rate: 2\n"
    )
    argv = ["prog", "--ros-args", "--params-file", str(robot), "-r", "__node:=arm_policy"]
    argv += ["-p", "rate:=3", "-p", "other_node:rate:=4"]
    where = CommandLineParameters.from_argv(argv, "policy_node")
    assert where.node_name == "arm_policy"
    assert where.explain("parameter 'seed' is 1.5 (float); expected an integer") == (
        f"parameter 'seed' is 1.5 (float); expected an integer [set in {robot}, line 3]"
    )
    assert where.sources("rate") == [f"{robot}, line 9", "-p rate:=3"]
    assert where.explain("parameter 'model' is required") == (
        f"parameter 'model' is required [not set in params file '{robot}']"
    )
    assert where.explain("no server to connect to") == "no server to connect to"
    nothing = CommandLineParameters.from_argv(["prog"], "policy_node")
    assert nothing.explain("parameter 'state_joints' is required") == (
        "parameter 'state_joints' is required [no params file given: --ros-args --params-file FILE]"
    )


def test_from_argv_stops_at_the_first_bad_params_file(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("/**:\n  ros__parameters:\n    a: 1\n")
    bad.write_bytes(b"\xff\xfe\x00")
    argv = ["prog", "--ros-args", "--params-file", str(good), "--params-file", str(bad)]
    with pytest.raises(ParamsFileError, match="bad.yaml"):
        CommandLineParameters.from_argv(argv, "policy_node")


@pytest.mark.ros
def test_rcl_refuses_exactly_the_files_the_checker_refuses(tmp_path: Path) -> None:
    rclpy = pytest.importorskip("rclpy")
    from rclpy.signals import SignalHandlerOptions

    for name, (data, problem) in SAMPLES.items():
        path = tmp_path / f"{name.replace(' ', '_')}.yaml"
        path.write_bytes(data)
        context = rclpy.context.Context()
        try:
            rclpy.init(
                args=["prog", "--ros-args", "--params-file", str(path)],
                context=context,
                signal_handler_options=SignalHandlerOptions.NO,
            )
        except Exception:  # rcl's RCLError
            accepted = False
        else:
            accepted = True
            rclpy.shutdown(context=context)
        assert accepted == (problem is None), f"{name}: rcl accepted={accepted}"


# (params files, -p values, parameter): what does the node get, and does the checker know?
_GIVEN_TWICE = {
    "string after integer": (["/**:\n  ros__parameters:\n    p: -1\n"], ["p:=abc"], "p"),
    "integer after string": (["/**:\n  ros__parameters:\n    p: hello\n"], ["p:=5"], "p"),
    "string after double": (["/**:\n  ros__parameters:\n    p: 0.2\n"], ["p:=auto"], "p"),
    "quoted number after integer": (["/**:\n  ros__parameters:\n    p: 1\n"], ["p:='2'"], "p"),
    "octal-looking double after integer": (
        ["/**:\n  ros__parameters:\n    p: 1\n"],
        ["p:=08"],
        "p",
    ),
    "bool after string": (["/**:\n  ros__parameters:\n    p: s\n"], ["p:=yes"], "p"),
    "string after list": (["/**:\n  ros__parameters:\n    p: [a, b]\n"], ["p:=x"], "p"),
    "list after string": (["/**:\n  ros__parameters:\n    p: x\n"], ["p:=[1, 2]"], "p"),
    "same type": (["/**:\n  ros__parameters:\n    p: 1\n"], ["p:=2"], "p"),
    "wildcard then node section then -p": (
        ["/**:\n  ros__parameters:\n    p: 1\n", "policy_node:\n  ros__parameters:\n    p: 5\n"],
        ["p:=3"],
        "p",
    ),
    "node key written two ways": (
        ["/policy_node:\n  ros__parameters:\n    p: 6\n"],
        ["p:=1", "policy_node:p:=3"],
        "p",
    ),
    "named -p after a node section": (
        ["policy_node:\n  ros__parameters:\n    p: 5\n"],
        ["policy_node:p:=abc"],
        "p",
    ),
    "node section then wildcard": (
        ["policy_node:\n  ros__parameters:\n    p: 5\n", "/**:\n  ros__parameters:\n    p: 1\n"],
        [],
        "p",
    ),
}


_TAKES_THE_LAST = {
    "integer after string",
    "bool after string",
    "string after list",
    "same type",
    "node section then wildcard",
    "node key written two ways",
}


@pytest.mark.ros
@pytest.mark.parametrize("case", list(_GIVEN_TWICE))
def test_ignored_value_knows_what_rclpy_gives_the_node(case: str, tmp_path: Path) -> None:
    """The checker's model of rcl's per-type values and rclpy's reading, against the real
    thing: the value the node gets is the last one given, or the one ignored_value names."""
    rclpy = pytest.importorskip("rclpy")
    from rclpy.node import Node
    from rclpy.signals import SignalHandlerOptions

    files, overrides, name = _GIVEN_TWICE[case]
    argv = ["prog", "--ros-args"]
    for i, text in enumerate(files):
        path = tmp_path / f"{i}.yaml"
        path.write_text(text)
        argv += ["--params-file", str(path)]
    for override in overrides:
        argv += ["-p", override]
    given = CommandLineParameters.from_argv(argv, "policy_node")
    ignored = given.ignored_value()
    meant = [v for v in given.given if v.name == name][-1]
    expected = meant.value if ignored is None else ignored[1].value
    if ignored is not None:
        assert ignored[0] is meant
    context = rclpy.context.Context()
    rclpy.init(args=argv, context=context, signal_handler_options=SignalHandlerOptions.NO)
    try:
        node = Node("policy_node", context=context)
        value = node._parameter_overrides[name].value
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
    assert (list(value) if not isinstance(value, (str, int, float)) else value) == expected
    assert type(value) is type(expected) or isinstance(expected, list)
    # Where the last value is the node's, nothing is refused.
    assert (ignored is None) == (case in _TAKES_THE_LAST)


def test_an_ignored_value_is_explained_with_both_sources(tmp_path: Path) -> None:
    params = tmp_path / "robot.yaml"
    params.write_text("/**:\n  ros__parameters:\n    seed: -1\n")
    argv = ["prog", "--ros-args", "--params-file", str(params), "-p", "seed:=abc"]
    given = CommandLineParameters.from_argv(argv, "policy_node")
    ignored = given.ignored_value()
    assert ignored is not None
    assert given.explain_ignored(*ignored, "an integer") == (
        "parameter 'seed' is 'abc' (a string) in -p seed:=abc; expected an integer, but the "
        f"node would get -1 (an integer) in {params}, line 3 instead (rcl keeps one value of "
        "each type and rclpy reads the integer first; give the parameter one type)"
    )
