"""The ``main()`` of every relay_ros node: usage, checked parameters, a clean start and stop.

:func:`run_node` is what ``policy_node``, ``sim_arm`` and ``sim_cameras`` run:

1. ``--help`` / ``-h`` (outside ``--ros-args``) prints the program's usage and exits 0
   without starting ROS;
2. SIGINT and SIGTERM are taken by :mod:`relay_ros.stop_signals` (the console scripts
   take them first thing, :mod:`relay_ros.entry_points`): the first one stops the
   node, later ones are ignored, none interrupts start-up or cleanup;
3. every ``--params-file`` is read and checked before rcl sees it
   (:mod:`relay_ros.node.params_files`): a bad file is one FATAL line naming the file,
   line and problem, exit 2; so is a value rcl would ignore without a word (``seed: -1``
   in a file, then ``-p seed:=abc``: rcl keeps the integer), naming the parameter, the
   value and what the parameter takes (the program's ``parameter_type``);
4. ``rclpy.init`` without rclpy's signal handlers (they would shut the context down
   from another thread while this one uses it); a command line rcl refuses is one
   FATAL line, exit 2;
5. the node is built; a configuration error (the program's ``config_errors``, or a
   value rclpy refuses for a declared parameter's type or range) is one FATAL line
   naming where the parameter was set, exit 2, and nothing was published;
6. a SingleThreadedExecutor spins until the stop signal, which wakes it through a
   guard condition; then the node is destroyed and rclpy shut down, and the program
   exits 0, which ``ros2 launch`` reports as "process has finished cleanly".

A stop signal during start-up lets the step under way finish, then skips the rest.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import rclpy
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions

from relay_ros.node.params_files import CommandLineParameters, ParamsFileError, user_arguments
from relay_ros.stop_signals import StopSignals, stop_signals

__all__ = [
    "HELP_FLAGS",
    "NodeProgram",
    "UsageRow",
    "default_row",
    "format_usage",
    "run_node",
    "type_words",
    "typed_row",
]

#: rclpy's refusals of a given value for a declared parameter (type, range).
_RCLPY_PARAMETER_ERRORS = (InvalidParameterTypeException, InvalidParameterValueException)

#: Arguments that ask for the usage instead of a run.
HELP_FLAGS = frozenset({"-h", "--help"})


@dataclass(frozen=True)
class UsageRow:
    """One line of a usage's topic or parameter list."""

    name: str
    kind: str
    text: str


_TYPE_NAMES = {
    Parameter.Type.BOOL: "bool",
    Parameter.Type.INTEGER: "int",
    Parameter.Type.DOUBLE: "double",
    Parameter.Type.STRING: "string",
    Parameter.Type.BYTE_ARRAY: "byte[]",
    Parameter.Type.BOOL_ARRAY: "bool[]",
    Parameter.Type.INTEGER_ARRAY: "int[]",
    Parameter.Type.DOUBLE_ARRAY: "double[]",
    Parameter.Type.STRING_ARRAY: "string[]",
}


_TYPE_WORDS = {
    Parameter.Type.BOOL: "true or false",
    Parameter.Type.INTEGER: "an integer",
    Parameter.Type.DOUBLE: "a double (with a decimal point)",
    Parameter.Type.STRING: "a string",
    Parameter.Type.BYTE_ARRAY: "a list of bytes",
    Parameter.Type.BOOL_ARRAY: "a list of bools",
    Parameter.Type.INTEGER_ARRAY: "a list of integers",
    Parameter.Type.DOUBLE_ARRAY: "a list of doubles",
    Parameter.Type.STRING_ARRAY: "a list of strings",
}


def type_words(kind: Parameter.Type) -> str:
    """What a parameter of ROS type ``kind`` takes, in words (``an integer``)."""
    return _TYPE_WORDS.get(kind, kind.name.lower())


def typed_row(name: str, kind: Parameter.Type, text: str) -> UsageRow:
    """A usage row for a parameter declared by type only."""
    return UsageRow(name, _TYPE_NAMES.get(kind, kind.name.lower()), text)


def _shown(value: Any) -> str:
    """A default as it is written on a ROS command line (``true``, ``[a, b]``)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return str(value)


def default_row(name: str, default: Any, text: str) -> UsageRow:
    """A usage row for a parameter declared with a default (its type is the default's)."""
    kind = _TYPE_NAMES[Parameter.Type.from_parameter_value(default)]
    return UsageRow(name, f"{kind}; default {_shown(default)}", text)


@dataclass(frozen=True)
class NodeProgram:
    """What :func:`run_node` needs to know about one node executable.

    Attributes:
        name: The executable and the node's default name (log lines before the node
            exists use it).
        make_node: Builds the node (default context, names and parameters from the
            command line); it runs after ``rclpy.init``.
        usage: The ``--help`` text (see :func:`format_usage`).
        config_errors: Exceptions that mean a configuration mistake: one FATAL line,
            exit 2, instead of a traceback.
        parameter_type: What a parameter of the node takes, in words (``an integer``),
            or None for a name the node does not declare; named when a value is refused.
    """

    name: str
    make_node: Callable[[], Any]
    usage: Callable[[], str]
    config_errors: tuple[type[Exception], ...] = ()
    parameter_type: Callable[[str], str | None] = lambda name: None


def format_usage(
    program: str,
    summary: str,
    *,
    topics: Iterable[UsageRow],
    parameters: Iterable[UsageRow],
    docs: str,
    example: str,
) -> str:
    """A node's ``--help``: how to start it, its topics and parameters, where to read more."""
    width = 88
    lines = [
        f"usage: {program} [-h] [--ros-args [--params-file FILE] [-p NAME:=VALUE] "
        "[-r __ns:=/NAMESPACE] ...]",
        "",
        *textwrap.wrap(" ".join(summary.split()), width),
        "",
        "example:",
        f"  {example}",
        "",
        "topics and services (relative names follow the node's namespace):",
    ]
    for row in topics:
        lines += textwrap.wrap(
            f"{row.name}  {row.kind}: {row.text}",
            width,
            initial_indent="  ",
            subsequent_indent="      ",
        )
    lines += ["", "parameters (--params-file FILE or -p NAME:=VALUE):"]
    for row in parameters:
        lines += textwrap.wrap(
            f"{row.name} ({row.kind}): {row.text}",
            width,
            initial_indent="  ",
            subsequent_indent="      ",
        )
    lines += ["", f"reference: {docs}", ""]
    return "\n".join(lines)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def run_node(program: NodeProgram, args: Sequence[str] | None = None) -> int:
    """Run ``program`` with ``args`` (``sys.argv`` when None, as ``rclpy.init``); the exit code.

    0 after ``--help`` or a stop signal, 2 for a configuration or command-line
    mistake (one FATAL line on the log). Any other exception is a bug and propagates.
    """
    argv = list(sys.argv if args is None else args)
    if HELP_FLAGS & set(user_arguments(argv)):
        sys.stdout.write(program.usage())
        sys.stdout.flush()
        return 0
    with stop_signals() as stop:
        return _run(program, argv, stop)


def _run(program: NodeProgram, argv: list[str], stop: StopSignals) -> int:
    log = rclpy.logging.get_logger(program.name)
    try:
        parameters = CommandLineParameters.from_argv(argv, program.name)
    except ParamsFileError as exc:
        log.fatal(_one_line(exc))
        return 2
    ignored = parameters.ignored_value()
    if ignored is not None:
        meant, used = ignored
        log.fatal(parameters.explain_ignored(meant, used, program.parameter_type(meant.name)))
        return 2
    if stop.requested:
        log.info(f"{stop.describe()} during start-up: not starting")
        return 0
    try:
        rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    except _rclpy.RCLError as exc:
        log.fatal(f"cannot start with this command line: {_one_line(exc)}")
        return 2
    node: Any = None
    executor: SingleThreadedExecutor | None = None
    try:
        if stop.requested:
            log.info(f"{stop.describe()} during start-up: shutting down")
            return 0
        try:
            node = program.make_node()
        except program.config_errors + _RCLPY_PARAMETER_ERRORS as exc:
            log.fatal(f"{type(exc).__name__}: {_one_line(parameters.explain(str(exc)))}")
            return 2
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        # The signal thread triggers it: spin_once returns and the loop sees the stop.
        wake = node.create_guard_condition(lambda: None)
        forget = stop.on_stop(wake.trigger)
        try:
            while not stop.requested:
                executor.spin_once()
        except ExternalShutdownException:
            log.info("the ROS context was shut down: stopping")
        finally:
            forget()
        if stop.requested:
            log.info(f"{stop.describe()}: shutting down")
    finally:
        if executor is not None:
            executor.shutdown()
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            # Leave the signal handlers alone: rclpy's uninstall sets SIGINT to the
            # default action for a moment (and a Ctrl-C then kills the process, -2).
            rclpy.shutdown(uninstall_handlers=False)
    if stop.ignored:
        log.info(f"{stop.describe()}: stopped")
    return 0
