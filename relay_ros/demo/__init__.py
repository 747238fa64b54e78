"""``python -m relay_ros.demo``: the whole loop on one machine, and a picture of it.

Starts the reference policy server (a subprocess, so that its simulated inference
never holds this process's GIL), then, in this process, the simulated cameras, the
simulated arm (a ``joint_trajectory_controller`` stand-in per configured output) and
``policy_node`` with ``config/<model>.yaml``, all spun by one ``MultiThreadedExecutor``.
It runs once with early requests and once with synchronous requests (openpi's
``ActionChunkBroker`` behaviour), prints the streaming measures of both side by
side and writes a PNG of commanded vs followed joint positions.

One module per concept, so that everything except `run_demo` is tested without ROS:

- ``errors.py``: `DemoError`, `DemoArgumentError`;
- ``models.py``: `DEMO_MODELS`, `REQUEST_MODES`, `load_model_config`;
- ``launch_plan.py``: `demo_node_parameters`, `DEMO_LAUNCH_ARGUMENTS`,
  `demo_launch_plan`: what the demo starts and with which parameters (also used by
  ``launch/demo.launch.py``);
- ``server_process.py``: `server_command`, `ServerProcess`: the server subprocess,
  always terminated on exit;
- ``result.py``: `DemoResult`, `CommandedChunk`, `DemoProgress`: what a run produced;
- ``run.py``: `run_demo` -> `DemoResult`: one run of the loop with its measures and
  series;
- ``report.py``, ``plot.py``: `format_progress`, `format_summary`, `stall_intervals`,
  `plot_demo`: what the user sees;
- ``cli.py``: `main`, `build_parser`: argument parsing and printing only
  (``__main__.py`` calls `main`).

rclpy and matplotlib are imported inside the functions that need them, so that
importing this package (e.g. from a launch file) is cheap and needs neither.
Times are float seconds, positions radians (or metres for prismatic joints).
"""

from __future__ import annotations

from relay_ros.demo.cli import build_parser, main
from relay_ros.demo.errors import DemoArgumentError, DemoError
from relay_ros.demo.launch_plan import (
    DEMO_LAUNCH_ARGUMENTS,
    DemoLaunchPlan,
    demo_launch_plan,
    demo_node_parameters,
)
from relay_ros.demo.models import DEMO_MODELS, REQUEST_MODES, load_model_config
from relay_ros.demo.plot import plot_demo
from relay_ros.demo.report import format_progress, format_summary, stall_intervals
from relay_ros.demo.result import CommandedChunk, DemoProgress, DemoResult
from relay_ros.demo.run import run_demo
from relay_ros.demo.server_process import ServerProcess, server_command

__all__ = [
    "DEMO_LAUNCH_ARGUMENTS",
    "DEMO_MODELS",
    "REQUEST_MODES",
    "CommandedChunk",
    "DemoLaunchPlan",
    "DemoArgumentError",
    "DemoError",
    "DemoProgress",
    "DemoResult",
    "ServerProcess",
    "build_parser",
    "demo_launch_plan",
    "demo_node_parameters",
    "format_progress",
    "format_summary",
    "load_model_config",
    "main",
    "plot_demo",
    "run_demo",
    "server_command",
    "stall_intervals",
]
