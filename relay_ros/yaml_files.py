"""Reading a user's YAML file (camera map, params file) with one-line errors that say where.

PyYAML's own errors span several lines and, for bytes that are not UTF-8, escape as a
``UnicodeDecodeError`` without the file's name when the file is opened as text. Here
the file is read as bytes and handed to PyYAML (which decodes UTF-8 and, with a byte
order mark, UTF-16, as libyaml and so rcl do); every failure becomes a
:class:`YamlFileError` naming the file, the line and column, and what is wrong:

- ``camera map '/x.yaml' cannot be read: No such file or directory``
- ``params file '/x.yaml' is not UTF-8 text: byte 0xe9 at line 3, column 12 (invalid
  continuation byte); save it as UTF-8``
- ``params file '/x.yaml' is not valid YAML: line 4, column 1: expected ',' or ']', but
  got '<stream end>' (while parsing a flow sequence from line 3, column 8)``
"""

from __future__ import annotations

import os
from typing import Any

import yaml

__all__ = ["YamlFileError", "compose_yaml_file", "describe_yaml_error", "load_yaml_file"]


class YamlFileError(ValueError):
    """A YAML file cannot be read, decoded or parsed; the message says which, where and why."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _byte_position(data: bytes, offset: int) -> str:
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}"


def _text_position(data: bytes, index: int) -> str:
    text = data.decode("utf-8", errors="replace")
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return f"line {line}, column {column}"


def describe_yaml_error(exc: yaml.YAMLError, data: bytes) -> str:
    """``exc`` as one line (position first), for a document read from ``data``."""
    if isinstance(exc, yaml.reader.ReaderError):
        if exc.encoding == "unicode":  # a control character in decoded text
            return (
                f"has the control character U+{exc.character:04X} at "
                f"{_text_position(data, exc.position)}, which YAML does not allow"
            )
        return (
            f"is not {exc.encoding.upper().replace('_', '-')} text: byte 0x{exc.character:02x} "
            f"at {_byte_position(data, exc.position)} ({exc.reason}); save it as UTF-8"
        )
    if isinstance(exc, yaml.composer.ComposerError) and exc.problem == "but found another document":
        return (
            f"holds more than one YAML document (another starts at {_where(exc.problem_mark)}); "
            "expected one"
        )
    if isinstance(exc, yaml.MarkedYAMLError):
        parts = []
        if exc.problem_mark is not None:
            parts.append(f"{_where(exc.problem_mark)}: ")
        parts.append(str(exc.problem or exc.context or "malformed"))
        if exc.context and exc.problem:
            context = str(exc.context)
            if exc.context_mark is not None and exc.context_mark != exc.problem_mark:
                context += f" from {_where(exc.context_mark)}"
            parts.append(f" ({context})")
        return "is not valid YAML: " + "".join(parts)
    return "is not valid YAML: " + " ".join(str(exc).split())


def _read(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        with open(path, "rb") as stream:
            return stream.read()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise YamlFileError(f"{what} {os.fspath(path)!r} cannot be read: {reason}") from None


def load_yaml_file(
    path: str | os.PathLike[str], *, what: str, loader: type[Any] = yaml.SafeLoader
) -> Any:
    """The one YAML document in ``path`` as Python data (``loader``: a SafeLoader subclass).

    Raises:
        YamlFileError: unreadable, not UTF-8 (or UTF-16 with a byte order mark), or not
            valid YAML; ``what`` (e.g. ``"camera map"``) starts the message.
    """
    data = _read(path, what)
    try:
        return yaml.load(data, Loader=loader)  # noqa: S506 - callers pass SafeLoader subclasses
    except yaml.YAMLError as exc:
        raise YamlFileError(
            f"{what} {os.fspath(path)!r} {describe_yaml_error(exc, data)}"
        ) from None


def compose_yaml_file(path: str | os.PathLike[str], *, what: str) -> yaml.Node | None:
    """The one YAML document in ``path`` as a node tree (with line numbers), None if empty.

    Raises:
        YamlFileError: as :func:`load_yaml_file`.
    """
    data = _read(path, what)
    try:
        return yaml.compose(data, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise YamlFileError(
            f"{what} {os.fspath(path)!r} {describe_yaml_error(exc, data)}"
        ) from None
