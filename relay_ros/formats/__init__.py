"""Wire formats: one object per format, owning everything that differs between servers.

- :mod:`~relay_ros.formats.pi`: the seeds' π0 / π0.5 format (``images`` + padded ``state``);
- :mod:`~relay_ros.formats.groot`: the seeds' GR00T format (``video`` + state groups);
- :mod:`~relay_ros.formats.openpi_layout`: a stock openpi server's environment layout,
  described as data (:mod:`~relay_ros.formats.layout`, ``config/layouts/*.yaml``).

:func:`format_for` picks the object: the layout's when a layout is given, else the
model's (its registry entry's ``family`` names the format). The node, the client's
reply check and the reference server all use these objects
(:class:`~relay_ros.formats.base.WireFormat`); nothing outside this package tests a
model family. A new format is one module here and one entry in :data:`FORMATS`; a
new layout is one YAML file.
"""

from __future__ import annotations

import functools
import os

from relay_ros.formats.base import FormatError, WireFormat
from relay_ros.formats.groot import GROOT
from relay_ros.formats.layout import LayoutError, load_layout
from relay_ros.formats.openpi_layout import LayoutFormat
from relay_ros.formats.pi import PI
from relay_ros.models import UnknownModelError, get_model

__all__ = [
    "FORMATS",
    "FormatError",
    "LayoutError",
    "WireFormat",
    "format_for",
    "layout_format",
]

#: The formats a model's registry entry may name (its ``family``).
FORMATS: dict[str, WireFormat] = {"pi": PI, "groot": GROOT}


@functools.lru_cache(maxsize=32)
def _layout_format(spec: str, mtime: float | None) -> LayoutFormat:
    return LayoutFormat(load_layout(spec))


def layout_format(spec: str | os.PathLike[str]) -> LayoutFormat:
    """The format of the layout ``spec`` (a shipped name or a YAML path), read once
    per file version.

    Raises:
        LayoutError: an unknown name or a bad file.
    """
    text = os.fspath(spec)
    try:
        mtime: float | None = os.stat(os.path.expanduser(text)).st_mtime
    except OSError:
        mtime = None
    return _layout_format(text, mtime)


def format_for(model: str, layout: str | os.PathLike[str] | None = None) -> WireFormat:
    """The wire format a node set to ``model`` (and ``layout``, when not empty) speaks.

    Raises:
        FormatError: an unknown model, a registry entry naming an unknown format, or
            a bad layout (:class:`~relay_ros.formats.layout.LayoutError`).
    """
    if layout:
        return layout_format(layout)
    try:
        family = get_model(model).family
    except UnknownModelError as exc:
        raise FormatError(str(exc)) from None
    fmt = FORMATS.get(family)
    if fmt is None:
        raise FormatError(f"model {model!r}: wire format {family!r} is not one of {list(FORMATS)}")
    return fmt
