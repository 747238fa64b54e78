"""A too-old websockets (Humble's and Noble's apt package is 10.x) fails at import with
one line naming the version found and the pip command, before any wire module runs.

The old version is a real package directory put first on ``PYTHONPATH`` of a
subprocess, as an apt ``python3-websockets`` would be on a ROS install's path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from relay_ros.wire import MIN_WEBSOCKETS, _release, websockets_version_error

ROOT = Path(__file__).resolve().parents[1]


def _old_websockets(tmp_path: Path, version: str) -> Path:
    """A ``websockets`` package reporting ``version`` and lacking ``websockets.client``."""
    package = tmp_path / "old_site" / "websockets"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (package / "version.py").write_text(f'version = "{version}"\n')
    return package.parent


def _import_with(path: Path, module: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(path), str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "module",
    ["relay_ros.wire.client", "relay_ros.wire.codec", "relay_ros.server", "relay_ros"],
)
def test_old_websockets_gives_one_clear_line(tmp_path, module):
    old = _old_websockets(tmp_path, "10.4")
    # `import relay_ros` alone must keep working (PolicyClient is imported lazily).
    if module == "relay_ros":
        done = _import_with(old, "relay_ros; relay_ros.PolicyClient")
    else:
        done = _import_with(old, module)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "ImportError: relay_ros needs websockets >= 14.0 but found 10.4 at "
        f"{old / 'websockets' / '__init__.py'}; install a newer one: "
        'python3 -m pip install "websockets>=14"'
    )
    assert "ClientProtocol" not in done.stderr


def test_old_websockets_does_not_break_ros_free_helpers(tmp_path):
    """Modules that never touch the network still import (launch helpers, configs)."""
    old = _old_websockets(tmp_path, "10.4")
    done = _import_with(old, "relay_ros.node.launch_args, relay_ros.demo.launch_plan")
    assert done.returncode == 0, done.stderr


def test_missing_websockets_names_the_pip_command(tmp_path):
    # A module that raises ImportError stands in for "not installed".
    package = tmp_path / "broken" / "websockets"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('No module named websockets')\n")
    done = _import_with(package.parent, "relay_ros.wire")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: relay_ros needs the websockets package")
    assert last.endswith('python3 -m pip install "websockets>=14"')


def test_installed_websockets_is_accepted():
    import websockets

    assert websockets_version_error() is None
    assert _release(websockets.__version__) >= MIN_WEBSOCKETS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.4", (10, 4)),
        ("14.0", (14, 0)),
        ("15.0.1", (15, 0, 1)),
        ("16.0rc1", (16, 0)),
        ("17.4.dev0", (17, 4)),
        ("unknown", ()),
    ],
)
def test_release_numbers(text, expected):
    assert _release(text) == expected
