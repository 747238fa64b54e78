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

One check goes beyond reading a file, because rcl gets it wrong without a word: a
parameter set again with a value of another type (``seed: -1`` in a file, then
``-p seed:=abc``). rcl's parser keeps one value per type for each parameter, and
rclpy reads the first type it finds (bool, integer, double, string, then the
arrays), so the later value can be ignored while the earlier one is used.
:meth:`CommandLineParameters.ignored_value` finds such a value; the node's
``main()`` refuses it (:mod:`relay_ros.node.node_main`).

Plain Python (no rclpy): the argument grammar is rcl's (``--ros-args`` ... ``--``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from relay_ros.wire.env import redact_text
from relay_ros.yaml_files import YamlFileError, compose_yaml_file

__all__ = [
    "CommandLineParameters",
    "GivenValue",
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

# rcl's reading of a plain scalar (rcl_yaml_param_parser get_value): these words are
# bools, then C strtol (base 0) and strtod decide integer and double.
_TRUE = frozenset("Y y yes Yes YES true True TRUE on On ON".split())
_FALSE = frozenset("N n no No NO false False FALSE off Off OFF".split())
_C_INTEGER = re.compile(r"[ \t\n\v\f\r]*[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_SPECIAL_DOUBLES = {
    f"{sign}.{word}": float(f"{sign or '+'}{word}")
    for sign in ("", "+", "-")
    for word in ("inf", "Inf", "INF")
} | {f".{word}": math.nan for word in ("nan", "NaN", "NAN")}
# The order in which rclpy reads rcl's per-type values of one parameter: the first wins.
_READ_ORDER = (
    "bool",
    "integer",
    "double",
    "string",
    "bool array",
    "integer array",
    "double array",
    "string array",
)


class ParamsFileError(ValueError):
    """A ``--params-file`` cannot be used; the message names the file, line and problem."""


def _rcl_scalar(text: str, quoted: bool) -> tuple[str, Any]:
    """``(type, value)`` of a YAML scalar as rcl reads it (``"integer"``, ``-1``)."""
    if quoted:
        return "string", text
    if text in _TRUE or text in _FALSE:
        return "bool", text in _TRUE
    if _C_INTEGER.fullmatch(text):
        number = _c_integer(text)
        if -(2**63) <= number < 2**63:  # else strtol overflows and strtod reads it
            return "integer", number
    if text in _SPECIAL_DOUBLES:
        return "double", _SPECIAL_DOUBLES[text]
    if "_" not in text and text.strip() == text and text:
        try:
            return "double", float(text)
        except ValueError:
            pass
    return "string", text


def _c_integer(text: str) -> int:
    digits = text.strip()
    sign = -1 if digits.startswith("-") else 1
    digits = digits.lstrip("+-")
    if digits[:2].lower() == "0x":
        return sign * int(digits[2:], 16)
    if digits.startswith("0"):
        return sign * int(digits, 8)
    return sign * int(digits)


def _read_rank(kind: str) -> int:
    return _READ_ORDER.index(kind) if kind in _READ_ORDER else len(_READ_ORDER)


def _rcl_value(node: yaml.Node) -> tuple[str, Any]:
    """``(type, value)`` of a parameter's YAML value as rcl reads it."""
    if isinstance(node, yaml.SequenceNode):
        items = [_rcl_value(item) for item in node.value if isinstance(item, yaml.ScalarNode)]
        kind = items[0][0] if items else "string"
        return f"{kind} array", [value for _, value in items]
    if isinstance(node, yaml.ScalarNode):
        return _rcl_scalar(str(node.value), node.style in ("'", '"'))
    return "mapping", None


def _rcl_text(text: str) -> tuple[str, Any]:
    """``(type, value)`` of the value of a ``-p name:=value`` as rcl reads it."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        node = None
    if node is None:
        return "string", text
    return _rcl_value(node)


@dataclass(frozen=True)
class ParamsFileSetting:
    """One parameter value in a params file.

    Attributes:
        node: The node key it is under, as a path (``/policy_node``, ``/**``).
        name: The parameter name (nested mappings joined with dots).
        line: 1-based line of the name in the file.
        kind: Its type as rcl reads it (``integer``, ``string array``).
        value: Its value as rcl reads it.
        section: The node key as rcl keeps it (as written: ``policy_node``).
    """

    node: str
    name: str
    line: int
    kind: str = "string"
    value: Any = None
    section: str = ""


@dataclass(frozen=True)
class GivenValue:
    """One value a node's command line gives a parameter (a params file's or a ``-p``).

    Attributes:
        node: The node key it is under, as rcl keeps it (as written; ``/**`` for a
            plain ``-p``).
        name: The parameter name.
        kind: Its type as rcl reads it (``integer``, ``string array``).
        value: The value as rcl reads it.
        source: Where it is set: ``"FILE, line N"`` or ``"-p name:=value"``.
    """

    node: str
    name: str
    kind: str
    value: Any
    source: str

    def describe(self) -> str:
        """``'abc' (a string) in -p seed:=abc``."""
        article = "an" if self.kind[0] in "aeiou" else "a"
        return f"{self.value!r} ({article} {self.kind}) in {self.source}"


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

    def parameters(mapping: yaml.MappingNode, node_path: str, entry: str, prefix: str) -> None:
        for key, value in mapping.value:
            name = prefix + str(key.value)
            if isinstance(value, yaml.MappingNode):
                parameters(value, node_path, entry, name + ".")
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
            kind, given = _rcl_value(value)
            settings.append(ParamsFileSetting(node_path, name, _line(key), kind, given, entry))

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
                # rcl keeps the node key as written: "policy_node" and "/policy_node"
                # are two sections to it.
                parameters(value, node_path, "/".join(path_parts), "")
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
        given: Every value for this node, files' and ``-p``, in command-line order.
    """

    node_name: str
    files: tuple[ParamsFile, ...]
    overrides: tuple[tuple[str, str], ...]
    given: tuple[GivenValue, ...] = ()

    @classmethod
    def from_argv(cls, argv: Sequence[str], node_name: str) -> CommandLineParameters:
        """Read the command line as rcl will (every params file is read and checked).

        Raises:
            ParamsFileError: the first params file that cannot be used.
        """
        options, _user = _ros_sections(argv)
        files: list[ParamsFile] = []
        overrides: list[tuple[str, str]] = []
        given: list[GivenValue] = []
        name = node_name
        for option, value in options:
            if value is None:
                continue
            if option == "--params-file":
                params_file = read_params_file(value)
                files.append(params_file)
                given += [
                    GivenValue(
                        s.section, s.name, s.kind, s.value, f"{params_file.path}, line {s.line}"
                    )
                    for s in params_file.settings
                ]
            elif option in ("-r", "--remap") and ":=" in value:
                source, target = value.split(":=", 1)
                if source.rsplit(":", 1)[-1] in ("__node", "__name"):
                    name = target
            elif option in ("-p", "--param") and ":=" in value:
                key, text = value.split(":=", 1)
                node, _, parameter = key.rpartition(":")
                if not node or node in (node_name, name):
                    overrides.append((parameter, text))
                    kind, typed = _rcl_text(text)
                    given.append(GivenValue(node or "/**", parameter, kind, typed, f"-p {value}"))
        applies = [g for g in given if "*" in g.node or _node_token(g.node) == name]
        return cls(
            node_name=name, files=tuple(files), overrides=tuple(overrides), given=tuple(applies)
        )

    def ignored_value(self) -> tuple[GivenValue, GivenValue] | None:
        """``(meant, used)``: the first parameter whose last value rcl and rclpy would not use.

        The last value on the command line is what the user means. rcl keeps one
        value per type for each parameter of each node key, and rclpy takes the
        first type it finds (bool, integer, double, string, the arrays), so
        ``seed: -1`` in a file and then ``-p seed:=abc`` gives the node -1; of
        several node keys (``/**``, ``policy_node``, ``/policy_node``: rcl keeps them
        as written) rclpy takes the one that appeared last for the first time,
        whatever came later. None: every parameter gets its last value.
        """
        entries: dict[str, dict[str, dict[str, GivenValue]]] = {}
        for value in self.given:
            entries.setdefault(value.node, {}).setdefault(value.name, {})[value.kind] = value
        meant_values = {value.name: value for value in self.given}
        for name, meant in meant_values.items():
            used = meant
            for parameters in entries.values():
                by_kind = parameters.get(name)
                if by_kind:
                    used = by_kind[min(by_kind, key=_read_rank)]
            if used is not meant:
                return meant, used
        return None

    def explain_ignored(self, meant: GivenValue, used: GivenValue, expected: str | None) -> str:
        """The sentence refusing ``meant``, which the node would get as ``used``.

        ``expected``: what the parameter takes, in words (``an integer``), if known.
        """
        if used.node == meant.node:
            wanted = f"; expected {expected}" if expected else ""
            why = (
                f"rcl keeps one value of each type and rclpy reads the {used.kind} first; "
                "give the parameter one type"
            )
        else:
            wanted = ""
            why = (
                f"rclpy reads the '{used.node}' section after the '{meant.node}' one; "
                "set the parameter in one of them"
            )
        return redact_text(
            f"parameter '{meant.name}' is {meant.describe()}{wanted}, but the node would "
            f"get {used.describe()} instead ({why})"
        )

    def sources(self, parameter: str) -> list[str]:
        """Where ``parameter`` is set for this node: ``"FILE, line N"`` and ``-p`` values."""
        found: list[str] = []
        for params_file in self.files:
            for setting in params_file.settings:
                token = _node_token(setting.node)
                applies = "*" in setting.node or token == self.node_name
                if applies and setting.name == parameter:
                    found.append(f"{params_file.path}, line {setting.line}")
        # A URL's secrets (policy_url's user info, ?token=) are never shown.
        found += [
            f"-p {parameter}:={redact_text(text)}"
            for name, text in self.overrides
            if name == parameter
        ]
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
