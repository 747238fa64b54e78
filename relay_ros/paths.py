"""Where relay_ros finds its installed data files (``config/``), without ament_index_python.

Search order for the config directory, first existing one wins:

1. ``$RELAY_ROS_CONFIG_DIR`` (set it to use your own copies of the YAML files);
2. ``config/`` next to the ``relay_ros`` package (a source checkout or editable install);
3. ``<prefix>/share/relay_ros/config`` for every prefix in ``$AMENT_PREFIX_PATH``
   (a colcon install, where ``setup.py`` puts the ``data_files``);
4. ``sys.prefix/share/relay_ros/config`` (a plain ``pip install`` into a venv).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["ConfigNotFoundError", "config_dir", "config_file", "config_dir_candidates"]

_PACKAGE = "relay_ros"


class ConfigNotFoundError(RuntimeError):
    """No config directory, or no such file in it, was found."""


def config_dir_candidates() -> list[Path]:
    """Directories searched for config files, in priority order (they may not exist)."""
    candidates: list[Path] = []
    override = os.environ.get("RELAY_ROS_CONFIG_DIR")
    if override:
        candidates.append(Path(override).expanduser())
    candidates.append(Path(__file__).resolve().parents[1] / "config")
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            candidates.append(Path(prefix) / "share" / _PACKAGE / "config")
    candidates.append(Path(sys.prefix) / "share" / _PACKAGE / "config")
    return candidates


def config_dir() -> Path:
    """The first existing config directory.

    Raises:
        ConfigNotFoundError: none of :func:`config_dir_candidates` is a directory.
    """
    candidates = config_dir_candidates()
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    searched = ", ".join(str(c) for c in candidates)
    raise ConfigNotFoundError(
        f"no relay_ros config directory found; searched {searched}. "
        "Set RELAY_ROS_CONFIG_DIR to the directory holding the YAML files."
    )


def config_file(name: str) -> Path:
    """Path of ``name`` (e.g. ``"groot_embodiments.yaml"``) in the first directory that has it.

    Raises:
        ConfigNotFoundError: no candidate directory holds ``name``.
    """
    candidates = config_dir_candidates()
    for candidate in candidates:
        path = candidate / name
        if path.is_file():
            return path
    searched = ", ".join(str(c) for c in candidates)
    raise ConfigNotFoundError(
        f"config file {name!r} not found; searched {searched}. "
        "Set RELAY_ROS_CONFIG_DIR to the directory holding it."
    )
