"""The parameters a node's command line gives (``--params-file``, ``-p``), checked before rcl.

rcl parses every ``--params-file`` inside ``rclpy.init``, and a mistake there surfaces
as ``RCLError: ... Error parsing a event near line 0`` with a traceback. So a node's
``main()`` reads the files first (:meth:`CommandLineParameters.from_argv`): a file that
cannot be read, is not UTF-8, is not valid YAML or is not shaped the way rcl reads it
gives one :class:`ParamsFileError` naming the file, the line and what is wrong, and
nothing starts. The same reading remembers where each parameter was set, so that a
parameter error can say which file (and line) to fix (:meth:`CommandLineParameters.explain`).

The checks are those rcl makes, never stricter: a file rcl accepts passes.

- the top level maps node names (``policy_node``, ``/robot1/policy_node``, ``/**``;
  nested namespaces allowed) to mappings, and each node's ``ros__parameters`` is a
  mapping of names to values;
- a list holds values of one type (rcl refuses ``[1, 2.5]``: write ``[1.0, 2.5]``).

Plain Python (no rclpy): the argument grammar is rcl's (``--ros-args`` ... ``--``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from relay_ros.yaml_files import YamlFileError, compose_yaml_file

__all__ = [
    "CommandLineParameters",
    "ParamsFile",
    "ParamsFileError",
    "ParamsFileSetting",
    "read_params_file",
    "user_arguments",
]

# ROS options that take a value (rcl/arguments.c), and the ones that are flags.
_VALUE_OPTIONS = frozenset(
    {
        "-r",
        "--remap",
        "-p",
        "--param",
        "--params-file",
        "-e",
        "--enclave",
        "--log-level",
        "--log-config-file",
        "--log-file-name",
    }
)
_PARAMETERS = "ros__parameters"
_TAG_NAMES = {
    "tag:yaml.org,2002:int": "integer",
    "tag:yaml.org,2002:float": "double",
    "tag:yaml.org,2002:bool": "bool",
    "tag:yaml.org,2002:str": "string",
    "tag:yaml.org,2002:null": "null",
}
_PARAMETER_IN_MESSAGE = re.compile(r"parameter '([^']+)'")


class ParamsFileError(ValueError):
    """A ``--params-file`` cannot be used; the message names the file, line and problem."""


@dataclass(frozen=True)
class ParamsFileSetting:
    """One parameter value in a params file.

    Attributes:
        node: The node key it is under, as a path (``/policy_node``, ``/**``).
        name: The parameter name (nested mappings joined with dots).
        line: 1-based line of the name in the file.
    """

    node: str
    name: str
    line: int


@dataclass(frozen=True)
class ParamsFile:
    """A params file that rcl will accept, and the parameters it sets."""

    path: str
    settings: tuple[ParamsFileSetting, ...]


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if node.tag == "tag:yaml.org,2002:null":
        return "empty"
    return f"the value {node.value!r}"


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def read_params_file(path: str | os.PathLike[str]) -> ParamsFile:
    """Read and check one ROS 2 params file.

    Raises:
        ParamsFileError: unreadable, not UTF-8, not valid YAML (one document), or not
            shaped ``<node>: {ros__parameters: {name: value}}``; the message names the
            file and the line.
    """
    shown = os.fspath(path)
    try:
        root = compose_yaml_file(path, what="params file")
    except YamlFileError as exc:
        raise ParamsFileError(str(exc)) from None
    settings: list[ParamsFileSetting] = []

    def fail(node: yaml.Node, problem: str) -> ParamsFileError:
        return ParamsFileError(f"params file {shown!r}, line {_line(node)}: {problem}")

    def parameters(mapping: yaml.MappingNode, node_path: str, prefix: str) -> None:
        for key, value in mapping.value:
            name = prefix + str(key.value)
            if isinstance(value, yaml.MappingNode):
                parameters(value, node_path, name + ".")
                continue
            if isinstance(value, yaml.SequenceNode):
                kinds = {
                    _TAG_NAMES.get(item.tag, item.tag)
                    for item in value.value
                    if isinstance(item, yaml.ScalarNode)
                }
                if len(kinds) > 1:
                    hint = (
                        " (write 1.0, not 1, in a list of doubles)"
                        if kinds == {"integer", "double"}
                        else ""
                    )
                    raise fail(
                        key,
                        f"parameter '{name}' of {node_path} mixes {' and '.join(sorted(kinds))} "
                        f"values; a ROS list parameter has one type{hint}",
                    )
            settings.append(ParamsFileSetting(node_path, name, _line(key)))

    def nodes(mapping: yaml.MappingNode, path_parts: list[str]) -> None:
        for key, value in mapping.value:
            if not isinstance(key, yaml.ScalarNode):
                raise fail(key, f"a key is {_kind(key)}; expected a node name")
            name = str(key.value)
            if name == _PARAMETERS:
                if not path_parts:
                    raise fail(
                        key,
                        "'ros__parameters' is at the top level; expected it under "
                        "a node name, e.g. 'policy_node:' or '/**:'",
                    )
                node_path = "/" + "/".join(p.strip("/") for p in path_parts)
                if not isinstance(value, yaml.MappingNode):
                    raise fail(
                        key,
                        f"'ros__parameters' of {node_path} is {_kind(value)}; expected a "
                        "mapping of parameter names to values",
                    )
                parameters(value, node_path, "")
            elif isinstance(value, yaml.MappingNode):
                nodes(value, [*path_parts, name])
            else:
                under = f" under /{'/'.join(path_parts)}" if path_parts else ""
                raise fail(
                    key,
                    f"{name!r}{under} is {_kind(value)}, outside 'ros__parameters'; expected "
                    "a node name (or namespace) with 'ros__parameters:' under it",
                )

    if root is None:
        return ParamsFile(shown, ())
    if not isinstance(root, yaml.MappingNode):
        raise fail(
            root,
            f"the file is {_kind(root)}; expected '<node name>: {{ros__parameters: "
            "{...}}' at the top level",
        )
    nodes(root, [])
    return ParamsFile(shown, tuple(settings))


def _ros_sections(argv: Sequence[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """The ROS options of ``argv`` as ``(option, value)`` (None for flags), and the
    other (user) arguments: rcl's grammar, ``--ros-args`` up to ``--`` or the end."""
    options: list[tuple[str, str | None]] = []
    user: list[str] = []
    i = 0
    in_ros = False
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--ros-args":
            in_ros = True
        elif not in_ros:
            user.append(token)
        elif token == "--":
            in_ros = False
        elif token in _VALUE_OPTIONS and i < len(argv):
            options.append((token, argv[i]))
            i += 1
        else:
            options.append((token, None))
    return options, user


def user_arguments(argv: Sequence[str]) -> list[str]:
    """The arguments outside ``--ros-args`` sections (e.g. ``--help``), in order."""
    return _ros_sections(argv)[1]


def _node_token(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class CommandLineParameters:
    """The params files and ``-p`` values of one node's command line, and the node's name.

    Attributes:
        node_name: The node's name (``-r __node:=`` or the program's default).
        files: Every ``--params-file``, read and checked, in order.
        overrides: ``(name, value text)`` of every ``-p name:=value`` for this node.
    """

    node_name: str
    files: tuple[ParamsFile, ...]
    overrides: tuple[tuple[str, str], ...]

    @classmethod
    def from_argv(cls, argv: Sequence[str], node_name: str) -> CommandLineParameters:
        """Read the command line as rcl will (every params file is read and checked).

        Raises:
            ParamsFileError: the first params file that cannot be used.
        """
        options, _user = _ros_sections(argv)
        files: list[ParamsFile] = []
        overrides: list[tuple[str, str]] = []
        name = node_name
        for option, value in options:
            if value is None:
                continue
            if option == "--params-file":
                files.append(read_params_file(value))
            elif option in ("-r", "--remap") and ":=" in value:
                source, target = value.split(":=", 1)
                if source.rsplit(":", 1)[-1] in ("__node", "__name"):
                    name = target
            elif option in ("-p", "--param") and ":=" in value:
                key, text = value.split(":=", 1)
                node, _, parameter = key.rpartition(":")
                if not node or node in (node_name, name):
                    overrides.append((parameter, text))
        return cls(node_name=name, files=tuple(files), overrides=tuple(overrides))

    def sources(self, parameter: str) -> list[str]:
        """Where ``parameter`` is set for this node: ``"FILE, line N"`` and ``-p`` values."""
        found: list[str] = []
        for params_file in self.files:
            for setting in params_file.settings:
                token = _node_token(setting.node)
                applies = "*" in setting.node or token == self.node_name
                if applies and setting.name == parameter:
                    found.append(f"{params_file.path}, line {setting.line}")
        found += [f"-p {parameter}:={text}" for name, text in self.overrides if name == parameter]
        return found

    def explain(self, message: str) -> str:
        """``message`` (a parameter error) with where its parameter was set, or which
        params files were read when it was set in none of them."""
        match = _PARAMETER_IN_MESSAGE.search(message)
        if match is None:
            return message
        found = self.sources(match.group(1))
        if found:
            return f"{message} [set in {'; '.join(found)}]"
        if self.files:
            listed = ", ".join(repr(f.path) for f in self.files)
            return f"{message} [not set in params file {listed}]"
        return f"{message} [no params file given: --ros-args --params-file FILE]"
