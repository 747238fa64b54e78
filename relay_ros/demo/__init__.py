"""``python -m relay_ros.demo``: the whole loop on one machine, and a picture of it.

Starts the reference policy server (a subprocess, so that its simulated inference
never holds this process's GIL), then, in this process, the simulated cameras, the
simulated arm (a ``joint_trajectory_controller`` stand-in per configured output) and
``policy_node`` with ``config/<model>.yaml``, spun by two ``SingleThreadedExecutor`` s in
their own threads. The cameras draw a simulated world whose red target the reference
policy has to find and reach. It runs once with early requests and once with
synchronous requests (openpi's ``ActionChunkBroker`` behaviour), prints the task and
streaming measures of both side by side and writes a PNG of commanded vs followed
joint positions.

One module per concept, so that everything except `run_demo` is tested without ROS:

- ``errors.py``: `DemoError`, `DemoArgumentError`;
- ``models.py``: `REQUEST_MODES`, `load_model_config`;
- ``launch_plan.py``: `demo_node_parameters`, `DEMO_LAUNCH_ARGUMENTS`,
  `demo_launch_plan`: what the demo starts and with which parameters (also used by
  ``launch/demo.launch.py``);
- ``server_process.py``: `server_command`, `ServerProcess`: the server subprocess,
  always terminated on exit;
- ``policy_settings.py``: `DemoPolicy`, `FAULTS`: the policy, its noise, the
  smoothing and the wiring mistake to make;
- ``result.py``: `DemoResult`, `CommandedChunk`, `DemoProgress`: what a run produced;
- ``relay_ros.sim.task``: `TaskMeasures`, `task_measures` (re-exported);
- ``recorder.py``: `ChunkRecorder`, `LatencyCollector`: what a run records;
- ``rig.py``: `DemoRig`: the steps of a run on rclpy (start, wait, run, snapshot, stop);
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
from relay_ros.demo.models import REQUEST_MODES, load_model_config
from relay_ros.demo.plot import plot_demo
from relay_ros.demo.policy_settings import FAULTS, POLICY_KINDS, SMOOTHINGS, DemoPolicy
from relay_ros.demo.report import format_progress, format_summary, stall_intervals
from relay_ros.demo.result import CommandedChunk, DemoProgress, DemoResult
from relay_ros.demo.run import run_demo
from relay_ros.demo.server_process import ServerProcess, server_command
from relay_ros.sim.task import TaskMeasures

__all__ = [
    "DEMO_LAUNCH_ARGUMENTS",
    "FAULTS",
    "POLICY_KINDS",
    "REQUEST_MODES",
    "SMOOTHINGS",
    "CommandedChunk",
    "DemoLaunchPlan",
    "DemoPolicy",
    "DemoArgumentError",
    "DemoError",
    "DemoProgress",
    "DemoResult",
    "ServerProcess",
    "TaskMeasures",
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
