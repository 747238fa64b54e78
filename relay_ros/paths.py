"""Where relay_ros finds its shipped configuration files.

The same code runs from a source checkout (``make setup`` installs it editable),
from a colcon install (files under ``share/relay_ros``) and from a pip install.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["config_dir", "config_file", "launch_dir"]

_PACKAGE = "relay_ros"


def _share_dirs() -> list[Path]:
    dirs: list[Path] = []
    try:
        from ament_index_python.packages import (
            PackageNotFoundError,
            get_package_share_directory,
        )

        try:
            dirs.append(Path(get_package_share_directory(_PACKAGE)))
        except PackageNotFoundError:
            pass
    except ImportError:
        pass
    dirs.append(Path(sys.prefix) / "share" / _PACKAGE)
    return dirs


def _resource_dir(name: str, env_var: str) -> Path:
    override = os.environ.get(env_var)
    if override:
        return Path(override)
    checkout = Path(__file__).resolve().parents[1] / name
    candidates = [checkout] + [share / name for share in _share_dirs()]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    searched = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"relay_ros {name}/ directory not found (searched {searched}); set {env_var}"
    )


def config_dir() -> Path:
    """The ``config/`` directory: $RELAY_ROS_CONFIG_DIR, the checkout's, or the installed share."""
    return _resource_dir("config", "RELAY_ROS_CONFIG_DIR")


def launch_dir() -> Path:
    """The ``launch/`` directory, found the same way as :func:`config_dir`."""
    return _resource_dir("launch", "RELAY_ROS_LAUNCH_DIR")


def config_file(name: str) -> Path:
    """A file in :func:`config_dir`, with an error naming the directory when it is missing."""
    path = config_dir() / name
    if not path.is_file():
        available = sorted(p.name for p in config_dir().glob("*.yaml"))
        raise FileNotFoundError(
            f"config file {name!r} not found in {path.parent}; have {available}"
        )
    return path
