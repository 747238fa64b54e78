"""``python -m relay_ros.demo``: the whole loop on one machine, and a picture of it.

Starts the reference policy server (a subprocess, so that its simulated inference
never holds this process's GIL), then, in this process, the simulated cameras, the
simulated arm (a ``joint_trajectory_controller`` stand-in per configured output) and
``policy_node`` with ``config/<model>.yaml``, all spun by one ``MultiThreadedExecutor``.
It runs once with early requests and once with synchronous requests (openpi's
``ActionChunkBroker`` behaviour), prints the streaming measures of both side by
side and writes a PNG of commanded vs followed joint positions.

Layers, so that everything except `run_demo` is tested without ROS:

- `load_model_config`, `demo_node_parameters`, `server_command`: what the demo
  starts and with which parameters (also used by ``launch/demo.launch.py``);
- `ServerProcess`: the server subprocess, always terminated on exit;
- `run_demo` -> `DemoResult`: one run of the loop with its measures and series;
- `format_progress`, `format_summary`, `plot_demo`: what the user sees;
- `main`: argument parsing and printing only.

rclpy and matplotlib are imported inside the functions that need them, so that
importing this module (e.g. from a launch file) is cheap and needs neither.
Times are float seconds, positions radians (or metres for prismatic joints).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import yaml

from relay_ros.launch_args import LaunchArgument
from relay_ros.params import (
    PARAMETERS,
    NodeConfig,
    build_config,
    limit_parameter_specs,
    output_parameter_specs,
)
from relay_ros.paths import config_dir, config_file

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

logger = logging.getLogger(__name__)

#: Models the demo can run (each has ``config/<model>.yaml`` and a camera map).
DEMO_MODELS: tuple[str, ...] = ("pi05", "pi0", "groot")
#: ``request_mode`` values of policy_node.
REQUEST_MODES: tuple[str, ...] = ("early", "sync")

# A modest camera size: enough to show real image traffic, cheap on a laptop.
_CAMERA_WIDTH = 320
_CAMERA_HEIGHT = 240
_CAMERA_RATE_HZ = 15.0
# Node names of the demo (policy_node's ~/preview resolves against its name).
_POLICY_NODE = "policy_node"
_CAMERAS_NODE = "sim_cameras"
_ARM_NODE = "sim_arm"
# Seconds of history before the first chunk that the recorded series keep.
_PRE_ROLL_S = 0.5
# Starts the server so that Linux terminates it when the demo dies without cleaning up
# (SIGKILL): PR_SET_PDEATHSIG survives exec. argv: parent pid, then the command.
_PDEATHSIG_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class DemoError(RuntimeError):
    """The demo could not start or stopped abnormally (server, nodes or first chunk)."""


class DemoArgumentError(ValueError):
    """An argument of `run_demo` or a helper is out of range (names the value)."""


# --------------------------------------------------------------------------- configuration


def _check_model(model: str) -> str:
    if model not in DEMO_MODELS:
        raise DemoArgumentError(f"model {model!r} is not one of {list(DEMO_MODELS)}")
    return model


def _check_mode(request_mode: str) -> str:
    if request_mode not in REQUEST_MODES:
        raise DemoArgumentError(
            f"request_mode {request_mode!r} is not one of {list(REQUEST_MODES)}"
        )
    return request_mode


def _read_ros_parameters(path: Path) -> dict[str, Any]:
    """The ``ros__parameters`` of a node parameter file (first node entry)."""
    with open(path, encoding="utf-8") as stream:
        data = yaml.safe_load(stream)
    if not isinstance(data, Mapping):
        raise DemoError(f"parameter file {str(path)!r} is not a mapping of node names")
    for entry in data.values():
        if isinstance(entry, Mapping) and isinstance(entry.get("ros__parameters"), Mapping):
            return dict(entry["ros__parameters"])
    raise DemoError(f"parameter file {str(path)!r} has no 'ros__parameters' section")


def load_model_config(model: str) -> NodeConfig:
    """The validated policy_node configuration of ``config/<model>.yaml``.

    Unset parameters take their node defaults, exactly as policy_node would.

    Raises:
        DemoArgumentError: ``model`` is not one of `DEMO_MODELS`.
        DemoError: the file has no ``ros__parameters`` section.
        relay_ros.params.ParameterError: the file's values are invalid.
    """
    path = config_file(f"{_check_model(model)}.yaml")
    given = _read_ros_parameters(path)
    values: dict[str, Any] = {spec.name: spec.default for spec in PARAMETERS}
    values.update(given)
    for name in values.get("outputs") or []:
        for spec in output_parameter_specs(name):
            values.setdefault(spec.name, spec.default)
    commanded = [
        joint for name in values.get("outputs") or [] for joint in values[f"outputs.{name}.joints"]
    ]
    for spec in limit_parameter_specs(list(dict.fromkeys(commanded))):
        values.setdefault(spec.name, spec.default)
    return build_config(values, default_config_dir=config_dir)


def _controller_name(output_name: str, topic: str) -> str:
    """``/arm_controller/joint_trajectory`` -> ``arm_controller`` (else ``<output>_controller``)."""
    parts = [p for p in topic.split("/") if p]
    if len(parts) >= 2 and parts[-1] == "joint_trajectory":
        return parts[-2]
    return f"{output_name}_controller"


def _camera_name(key: str) -> str:
    """A parameter-safe camera name for a model camera key (``video.front`` -> ``video_front``)."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in key)


def demo_node_parameters(
    model: str,
    *,
    port: int = 8000,
    request_mode: str = "early",
    host: str = "127.0.0.1",
) -> dict[str, list[Any]]:
    """The parameters of the three demo nodes, as launch ``parameters=`` lists.

    The cameras follow ``config/<model>_cameras.yaml`` (topics and raw/compressed
    transport) at 320x240 pixels, 15 Hz; the arm has one simulated controller per
    output of ``config/<model>.yaml`` (its joints and topic), starting at zero or at
    the middle of the joint limits when zero is outside them; policy_node uses the
    params file with ``policy_url`` pointing at the local server and ``request_mode``.

    Args:
        model: One of `DEMO_MODELS`.
        port: TCP port of the reference server.
        request_mode: ``"early"`` or ``"sync"``.
        host: Host of the reference server.

    Returns:
        ``{"sim_cameras": [dict], "sim_arm": [dict], "policy_node": [params file, dict]}``.

    Raises:
        DemoArgumentError: unknown model or request mode, or a port outside 1..65535.
        DemoError: a state joint is not commanded by any output (the simulated arm
            would never publish it).
    """
    config = load_model_config(model)
    _check_mode(request_mode)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise DemoArgumentError(f"port {port!r} is not an integer in [1, 65535]")
    from relay_ros.camera_map import load_camera_map

    cameras = load_camera_map(config.camera_map, allowed_keys=None, max_cameras=None)
    camera_params: dict[str, Any] = {"cameras": [_camera_name(c.key) for c in cameras]}
    for entry in cameras:
        name = _camera_name(entry.key)
        camera_params[f"cameras.{name}.topic"] = entry.topic
        camera_params[f"cameras.{name}.format"] = (
            "compressed" if entry.transport == "compressed" else "raw"
        )
        camera_params[f"cameras.{name}.width"] = _CAMERA_WIDTH
        camera_params[f"cameras.{name}.height"] = _CAMERA_HEIGHT
        camera_params[f"cameras.{name}.rate_hz"] = _CAMERA_RATE_HZ

    simulated = {joint for output in config.outputs for joint in output.joints}
    unserved = [joint for joint in config.state_joints if joint not in simulated]
    if unserved:
        raise DemoError(
            f"state_joints {unserved} of config/{model}.yaml are not commanded by any output; "
            "the simulated arm only publishes the joints of its controllers"
        )
    controllers = [_controller_name(o.name, o.topic) for o in config.outputs]
    arm_params: dict[str, Any] = {
        "controllers": controllers,
        "joint_states_topic": config.joint_states_topic,
    }
    for controller, output in zip(controllers, config.outputs):
        initial = []
        for joint in output.joints:
            lower, upper = config.joint_limits[joint]
            initial.append(0.0 if lower <= 0.0 <= upper else (lower + upper) / 2.0)
        arm_params[f"controllers.{controller}.joints"] = list(output.joints)
        arm_params[f"controllers.{controller}.topic"] = output.topic
        arm_params[f"controllers.{controller}.initial_positions"] = initial

    url_host = f"[{host}]" if ":" in host else host
    policy_overrides = {
        "policy_url": f"ws://{url_host}:{port}/{model}",
        "request_mode": request_mode,
    }
    return {
        "sim_cameras": [camera_params],
        "sim_arm": [arm_params],
        "policy_node": [str(config_file(f"{model}.yaml")), policy_overrides],
    }


def server_command(
    model: str,
    *,
    port: int = 0,
    latency_ms: float = 80.0,
    jitter_ms: float = 20.0,
    port_file: Path | None = None,
    executable: Sequence[str] = ("relay-policy-server",),
) -> list[str]:
    """The command line of the reference server for the demo.

    Args:
        model: One of `DEMO_MODELS` (the only model served).
        port: TCP port, 0 = any free port (then pass ``port_file``).
        latency_ms: Simulated inference time per request in ms (>= 0).
        jitter_ms: Uniform random extra latency in [-J, +J] ms (>= 0).
        port_file: Where the server writes its bound port.
        executable: The server program, e.g. ``[sys.executable, "-m", "relay_ros.server"]``.

    Raises:
        DemoArgumentError: unknown model, negative or non-finite latency or jitter,
            or a port outside 0..65535.
    """
    _check_model(model)
    for name, value in (("latency_ms", latency_ms), ("jitter_ms", jitter_ms)):
        if not math.isfinite(value) or value < 0.0:
            raise DemoArgumentError(f"{name} {value!r} is not a finite number of ms >= 0")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise DemoArgumentError(f"port {port!r} is not an integer in [0, 65535]")
    command = [
        *executable,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        model,
        "--latency-ms",
        f"{latency_ms:g}",
        "--jitter-ms",
        f"{jitter_ms:g}",
        "--log-level",
        "WARNING",
    ]
    if port_file is not None:
        command += ["--port-file", str(port_file)]
    return command


#: Arguments of ``launch/demo.launch.py`` (launch passes every value as a string).
DEMO_LAUNCH_ARGUMENTS: tuple[LaunchArgument, ...] = (
    LaunchArgument("model", "pi05", f"Policy model: one of {', '.join(DEMO_MODELS)}."),
    LaunchArgument("port", "8000", "TCP port of the reference policy server."),
    LaunchArgument("latency_ms", "80", "Simulated inference latency of the server, ms."),
    LaunchArgument("jitter_ms", "20", "Uniform extra latency in [-J, +J] ms."),
    LaunchArgument("request_mode", "early", "policy_node request_mode: early or sync."),
)


@dataclass(frozen=True)
class DemoLaunchPlan:
    """What ``launch/demo.launch.py`` starts.

    Attributes:
        server_cmd: Command line of ``relay-policy-server``.
        node_parameters: ``parameters=`` list per executable (``sim_cameras``,
            ``sim_arm``, ``policy_node``), see `demo_node_parameters`.
    """

    server_cmd: list[str]
    node_parameters: dict[str, list[Any]]


def demo_launch_plan(arguments: Mapping[str, str]) -> DemoLaunchPlan:
    """Turn the launch arguments (strings, missing = default) into what the launch file starts.

    Raises:
        DemoArgumentError: an unknown argument, or a value that is not a number where one
            is expected (names the argument and the value), or out of range.
    """
    known = {arg.name: arg.default for arg in DEMO_LAUNCH_ARGUMENTS}
    unknown = sorted(set(arguments) - set(known))
    if unknown:
        raise DemoArgumentError(
            f"unknown demo launch arguments {unknown}; expected some of {sorted(known)}"
        )
    values = {**known, **{k: str(v) for k, v in arguments.items()}}

    def number(name: str, kind: type) -> Any:
        text = values[name].strip()
        try:
            return kind(text)
        except ValueError:
            expected = "an integer" if kind is int else "a number"
            raise DemoArgumentError(
                f"launch argument {name!r} is {values[name]!r}; expected {expected}"
            ) from None

    model = values["model"].strip()
    port = number("port", int)
    if not 1 <= port <= 65535:
        raise DemoArgumentError(f"launch argument 'port' is {port!r}; expected 1..65535")
    latency_ms = number("latency_ms", float)
    jitter_ms = number("jitter_ms", float)
    command = server_command(model, port=port, latency_ms=latency_ms, jitter_ms=jitter_ms)
    parameters = demo_node_parameters(model, port=port, request_mode=values["request_mode"].strip())
    return DemoLaunchPlan(server_cmd=command, node_parameters=parameters)


# --------------------------------------------------------------------------- server process


class ServerProcess:
    """The reference server as a subprocess on a free port; a context manager.

    The server runs in its own session so that Ctrl-C reaches only the demo, which
    then stops the nodes first and the server last (no "disconnected" noise).
    `stop` terminates it (SIGTERM, then SIGKILL after ``stop_timeout_s``) and reaps it.
    On Linux the server also gets SIGTERM when the thread that started it dies, so
    even a SIGKILLed demo leaves no server behind.

    Args:
        model: Model to serve.
        latency_ms: Simulated inference time per request in ms.
        jitter_ms: Uniform random extra latency in [-J, +J] ms.
        startup_timeout_s: How long to wait for the port file in seconds.
        stop_timeout_s: How long to wait after SIGTERM before SIGKILL in seconds.
    """

    def __init__(
        self,
        model: str,
        *,
        latency_ms: float = 80.0,
        jitter_ms: float = 20.0,
        startup_timeout_s: float = 30.0,
        stop_timeout_s: float = 5.0,
    ) -> None:
        self._model = model
        self._latency_ms = latency_ms
        self._jitter_ms = jitter_ms
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._log: IO[bytes] | None = None
        self.port: int | None = None

    @property
    def pid(self) -> int | None:
        """Process id of the server, or None before `start`."""
        return None if self._process is None else self._process.pid

    def running(self) -> bool:
        """True while the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def url(self) -> str:
        """``ws://127.0.0.1:PORT/<model>`` of the running server."""
        if self.port is None:
            raise DemoError("the policy server has not been started")
        return f"ws://127.0.0.1:{self.port}/{self._model}"

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines the server wrote to stdout/stderr."""
        if self._tmp is None:
            return ""
        path = Path(self._tmp.name) / "server.log"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def start(self) -> ServerProcess:
        """Start the server and wait until it listens.

        Raises:
            DemoError: the server exited or did not listen within ``startup_timeout_s``
                (the message includes the end of its log).
        """
        self._tmp = tempfile.TemporaryDirectory(prefix="relay_ros_demo_")
        tmp = Path(self._tmp.name)
        port_file = tmp / "port"
        command = server_command(
            self._model,
            port=0,
            latency_ms=self._latency_ms,
            jitter_ms=self._jitter_ms,
            port_file=port_file,
            executable=self._executable(),
        )
        self._log = open(tmp / "server.log", "wb")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self._startup_timeout_s
        while True:
            text = port_file.read_text().strip() if port_file.exists() else ""
            if text:
                self.port = int(text)
                logger.info("policy server pid %d on port %d", self._process.pid, self.port)
                return self
            if self._process.poll() is not None:
                code = self._process.returncode
                tail = self.log_tail()
                self.stop()
                raise DemoError(f"the policy server exited with status {code}: {tail}")
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise DemoError(
                    f"the policy server did not listen within {self._startup_timeout_s:g} s: "
                    f"{tail or 'no output'}"
                )
            time.sleep(0.05)

    @staticmethod
    def _executable() -> tuple[str, ...]:
        server = (sys.executable, "-m", "relay_ros.server")
        if sys.platform.startswith("linux"):
            return (sys.executable, "-c", _PDEATHSIG_LAUNCHER, str(os.getpid()), *server)
        return server

    def stop(self) -> None:
        """Terminate and reap the server; idempotent."""
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(self._stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class CommandedChunk:
    """One chunk as policy_node published it (all commanded joints, from ``~/preview``).

    Attributes:
        stamp: ``header.stamp`` in seconds since the run's start (the publication time).
        times: (N,) time of each point in seconds since the run's start.
        positions: (N, D) positions per point, in `DemoResult.joint_names` order.
    """

    stamp: float
    times: np.ndarray
    positions: np.ndarray

    @property
    def end(self) -> float:
        """Time of the last point (s since the run's start)."""
        return float(self.times[-1])


@dataclass(frozen=True)
class DemoProgress:
    """A live snapshot of a run, handed to the ``progress`` callback ~2x per second.

    Attributes:
        request_mode: ``"early"`` or ``"sync"``.
        elapsed_s: Seconds since the first chunk (0 while starting).
        duration_s: Planned run time in seconds.
        chunks: Chunks published so far.
        latency_p50_s: Median observation -> reply latency in seconds, or None.
        stall_time_s: Time the arm had no future point to follow, seconds.
        starting: True until the first chunk reaches the arm.
    """

    request_mode: str
    elapsed_s: float
    duration_s: float
    chunks: int
    latency_p50_s: float | None
    stall_time_s: float
    starting: bool = False


@dataclass
class DemoResult:
    """Measures and recorded series of one demo run (see docs/demo.md).

    Times in the series are seconds since ``t0``, the publication of the first chunk.

    Attributes:
        model: Model ID.
        request_mode: ``"early"`` or ``"sync"``.
        latency_ms: Simulated inference latency of the server in ms.
        jitter_ms: Its jitter in ms.
        duration_s: Seconds measured (from the first chunk to the end of the run).
        execute_horizon: Actions executed per chunk (None = half the horizon).
        dt: Control period in seconds (spacing of the published points).
        requests: Observations sent to the server.
        chunks_received: Replies with a chunk.
        chunks_published: Chunks published to the controllers.
        refusals: Chunks or observations the node refused (safety, limits, stale input).
        error_replies: Error replies from the server.
        latencies_s: Every observation -> reply latency in seconds, in order.
        stall_time_s: Total time any controller had no future point to follow.
        stall_events: Separate holding periods (largest over controllers).
        boundary_steps: Boundary step ratio of every chunk switch, per controller name.
        action_age_p50_s: Median action age at execution in seconds, or None when the
            trajectories carry no observation time.
        action_age_max_s: Largest action age in seconds, or None.
        accepted: Trajectories the arm accepted (all controllers).
        rejected: Trajectories the arm rejected (all controllers).
        rejection_reasons: Count per rejection code.
        joint_names: Commanded joints, the columns of the position series.
        joint_limits: ``{joint: (lower, upper)}`` from the model config.
        times: (N,) control-cycle times of the arm.
        commanded: (N, D) positions the controllers commanded at each cycle.
        followed: (N, D) positions the joints followed (published on /joint_states).
        switch_times: Times a new trajectory took over on the arm.
        chunks: Every published chunk.
        server_pid: Process id of the server subprocess (gone when the run returns).
    """

    model: str
    request_mode: str
    latency_ms: float
    jitter_ms: float
    duration_s: float
    execute_horizon: int | None
    dt: float | None
    requests: int
    chunks_received: int
    chunks_published: int
    refusals: int
    error_replies: int
    latencies_s: np.ndarray
    stall_time_s: float
    stall_events: int
    boundary_steps: dict[str, np.ndarray]
    action_age_p50_s: float | None
    action_age_max_s: float | None
    accepted: int
    rejected: int
    rejection_reasons: dict[str, int]
    joint_names: tuple[str, ...]
    joint_limits: dict[str, tuple[float, float]]
    times: np.ndarray
    commanded: np.ndarray
    followed: np.ndarray
    switch_times: np.ndarray
    chunks: list[CommandedChunk] = field(default_factory=list)
    server_pid: int | None = None

    def latency_percentile_s(self, q: float) -> float | None:
        """The ``q``-th percentile (0..100) of the latencies in seconds, or None."""
        if self.latencies_s.size == 0:
            return None
        return float(np.percentile(self.latencies_s, q))

    @property
    def latency_p50_s(self) -> float | None:
        """Median latency in seconds, or None."""
        return self.latency_percentile_s(50.0)

    @property
    def latency_p99_s(self) -> float | None:
        """99th percentile latency in seconds, or None."""
        return self.latency_percentile_s(99.0)

    @property
    def boundary_step_max(self) -> float | None:
        """Largest boundary step ratio over all controllers, or None without switches."""
        values = [float(v.max()) for v in self.boundary_steps.values() if v.size]
        return max(values) if values else None

    def limit_violations(self, tolerance: float = 1e-6) -> list[str]:
        """Every joint whose commanded position left its limits, as sentences.

        Checks the points of every published chunk and the command of every control
        cycle. ``tolerance`` (rad or m) absorbs float32 rounding.
        """
        problems = []
        for j, joint in enumerate(self.joint_names):
            lower, upper = self.joint_limits[joint]
            values = [self.commanded[:, j]] + [c.positions[:, j] for c in self.chunks]
            merged = np.concatenate(values) if values else np.zeros(0)
            if merged.size == 0:
                continue
            low, high = float(merged.min()), float(merged.max())
            if low < lower - tolerance or high > upper + tolerance:
                problems.append(
                    f"joint {joint!r} was commanded in [{low:.4f}, {high:.4f}]; "
                    f"limits are [{lower:g}, {upper:g}]"
                )
        return problems


def stall_intervals(result: DemoResult) -> list[tuple[float, float]]:
    """The periods (start, end) in seconds when the arm had no future point to follow.

    Derived from the published chunks: a chunk's last point to the next chunk's
    publication (and to the end of the run after the last chunk).
    """
    intervals = []
    for i, chunk in enumerate(result.chunks):
        nxt = result.chunks[i + 1].stamp if i + 1 < len(result.chunks) else result.duration_s
        if nxt > chunk.end:
            intervals.append((chunk.end, nxt))
    return intervals


# --------------------------------------------------------------------------- the run


class _LatencyCollector:
    """Keeps every latency sample of a rolling `LatencyStats` by polling it often enough."""

    def __init__(self) -> None:
        self._seen = 0
        self.samples: list[float] = []

    def poll(self, stats: Any) -> None:
        values = stats.values()
        count = int(stats.count)
        new = count - self._seen
        if new > 0:
            self.samples.extend(values[-min(new, len(values)) :])
        self._seen = count


@contextlib.contextmanager
def _sigint_masked() -> Iterator[None]:
    """Ignore Ctrl-C while cleaning up (only possible in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _as_overrides(params: Mapping[str, Any]) -> list[Any]:
    from rclpy.parameter import Parameter

    return [Parameter(name, value=value) for name, value in params.items()]


def run_demo(
    model: str,
    duration_s: float,
    *,
    request_mode: str = "early",
    latency_ms: float = 80.0,
    jitter_ms: float = 20.0,
    progress: Callable[[DemoProgress], None] | None = None,
    context: Any = None,
    startup_timeout_s: float = 60.0,
    multi_threaded: bool = False,
) -> DemoResult:
    """Run the whole loop once and return what happened.

    Starts the server subprocess, then the simulated cameras and arm and policy_node
    (parameters from `demo_node_parameters`) on a ``MultiThreadedExecutor`` spinning in
    a thread; waits for the first chunk to reach the arm, runs ``duration_s`` seconds
    from then, and stops everything (executor, nodes, server) even on Ctrl-C.

    Args:
        model: One of `DEMO_MODELS`.
        duration_s: Seconds to run after the first chunk (> 0).
        request_mode: ``"early"`` or ``"sync"``.
        latency_ms: Simulated inference latency of the server in ms (>= 0).
        jitter_ms: Uniform extra latency in [-J, +J] ms (>= 0).
        progress: Called from this thread about twice per second with a `DemoProgress`.
        context: An initialised rclpy ``Context`` to use; None = create, init (without
            rclpy signal handlers, so Ctrl-C raises KeyboardInterrupt here) and shut
            down a private one.
        startup_timeout_s: Seconds to wait for the server and for the first chunk.
        multi_threaded: Spin policy_node on a ``MultiThreadedExecutor`` (as its ``main()``
            does) instead of a ``SingleThreadedExecutor``. Same behaviour (its callbacks
            are mutually exclusive) at several times the CPU cost.

    Raises:
        DemoArgumentError: an argument is out of range.
        DemoError: the server did not start or died, or no chunk arrived in time
            (the message says why, from policy_node's diagnostics).
        KeyboardInterrupt: Ctrl-C; everything was stopped before it propagates.
    """
    _check_model(model)
    _check_mode(request_mode)
    if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s > 0):
        raise DemoArgumentError(f"duration_s {duration_s!r} is not a positive number of seconds")
    server_command(model, latency_ms=latency_ms, jitter_ms=jitter_ms)  # validates both
    config = load_model_config(model)

    import rclpy
    from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions
    from rclpy.task import Future
    from trajectory_msgs.msg import JointTrajectory

    from relay_ros.policy_node import PolicyNode
    from relay_ros.sim.arm_node import SimArmNode
    from relay_ros.sim.cameras_node import SimCamerasNode

    own_context = context is None
    server = ServerProcess(
        model, latency_ms=latency_ms, jitter_ms=jitter_ms, startup_timeout_s=startup_timeout_s
    )
    nodes: list[Any] = []
    executors: list[Any] = []
    # Done = stop spinning. Executor.shutdown destroys the guard condition that callbacks
    # still running in a MultiThreadedExecutor's pool trigger when they finish (rclpy
    # Jazzy does not wait for them), so: stop spinning, drain the pools, then shut down.
    stop_spinning = Future()
    spin_threads: list[threading.Thread] = []
    spin_errors: list[BaseException] = []
    try:
        server.start()
        if own_context:
            context = rclpy.context.Context()
            rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
        params = demo_node_parameters(model, port=server.port or 0, request_mode=request_mode)
        cameras = SimCamerasNode(
            node_name=_CAMERAS_NODE,
            context=context,
            parameter_overrides=_as_overrides(params["sim_cameras"][0]),
        )
        nodes.append(cameras)
        arm = SimArmNode(
            node_name=_ARM_NODE,
            context=context,
            parameter_overrides=_as_overrides(params["sim_arm"][0]),
        )
        nodes.append(arm)

        joints = tuple(config.commanded_joints)
        column = {name: i for i, name in enumerate(joints)}
        recorded: list[tuple[float, np.ndarray, np.ndarray]] = []
        record_lock = threading.Lock()

        def on_preview(msg: JointTrajectory) -> None:
            names = list(msg.joint_names)
            if sorted(names) != sorted(joints) or not msg.points:
                return
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            tfs = np.array(
                [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points]
            )
            raw = np.array([list(p.positions) for p in msg.points], dtype=np.float64)
            positions = np.empty_like(raw)
            for i, name in enumerate(names):
                positions[:, column[name]] = raw[:, i]
            with record_lock:
                recorded.append((stamp, stamp + tfs, positions))

        recorder = rclpy.create_node("demo_recorder", context=context)
        nodes.append(recorder)
        recorder.create_subscription(JointTrajectory, f"/{_POLICY_NODE}/preview", on_preview, 100)
        policy = PolicyNode(
            _POLICY_NODE,
            context=context,
            cli_args=["--ros-args", "--params-file", params["policy_node"][0]],
            parameter_overrides=_as_overrides(params["policy_node"][1]),
        )
        nodes.append(policy)

        # Two executors, each spinning in its own thread: policy_node's, and the simulated
        # robot's (a separate process on a real system). All policy_node callbacks share
        # one MutuallyExclusiveCallbackGroup, so a MultiThreadedExecutor runs them no more
        # concurrently than a SingleThreadedExecutor; but while one runs, rclpy's
        # dispatcher keeps waking for the blocked ones (100 Hz joint states and ticks) and
        # burns several times the CPU, which on a busy 2-core machine delayed
        # /joint_states and camera frames by up to 2 s. See docs/demo.md.
        sim_executor = SingleThreadedExecutor(context=context)
        for node in (cameras, arm, recorder):
            sim_executor.add_node(node)
        policy_executor = (
            MultiThreadedExecutor(num_threads=2, context=context)
            if multi_threaded
            else SingleThreadedExecutor(context=context)
        )
        policy_executor.add_node(policy)
        executors.extend([policy_executor, sim_executor])

        def spin(executor: Any) -> None:
            try:
                executor.spin_until_future_complete(stop_spinning)
            except BaseException as exc:  # reported to the calling thread
                spin_errors.append(exc)

        for name, executor in (("policy", policy_executor), ("sim", sim_executor)):
            thread = threading.Thread(
                target=spin, args=(executor,), name=f"relay-demo-{name}-executor", daemon=True
            )
            thread.start()
            spin_threads.append(thread)

        def now() -> float:
            return policy.get_clock().now().nanoseconds * 1e-9

        def check_alive() -> None:
            if spin_errors:
                raise DemoError(f"the ROS executor stopped: {spin_errors[0]!r}")
            if not server.running():
                raise DemoError(f"the policy server exited: {server.log_tail() or 'no output'}")

        latencies = _LatencyCollector()

        def stall_now() -> float:
            return max((m.stall_time_s for m in arm.metrics().values()), default=0.0)

        def report(elapsed: float, starting: bool) -> None:
            latencies.poll(policy.latency)
            if progress is None:
                return
            samples = latencies.samples
            progress(
                DemoProgress(
                    request_mode=request_mode,
                    elapsed_s=elapsed,
                    duration_s=float(duration_s),
                    chunks=policy.counts["chunks_published"],
                    latency_p50_s=float(np.median(samples)) if samples else None,
                    stall_time_s=stall_now(),
                    starting=starting,
                )
            )

        # Start-up: wait for the first chunk on the arm.
        deadline = time.monotonic() + startup_timeout_s
        last_report = 0.0
        while True:
            check_alive()
            with record_lock:
                first = recorded[0][0] if recorded else None
            if first is not None:
                break
            if time.monotonic() > deadline:
                status = policy.diagnostics_status()
                raise DemoError(
                    f"no chunk reached the arm within {startup_timeout_s:g} s; "
                    f"policy_node says: {status.message}"
                )
            if time.monotonic() - last_report >= 0.5:
                report(0.0, True)
                last_report = time.monotonic()
            time.sleep(0.05)

        t0 = first
        t_end = t0 + float(duration_s)
        while True:
            check_alive()
            current = now()
            report(min(current - t0, float(duration_s)), False)
            remaining = t_end - current
            if remaining <= 0:
                break
            time.sleep(min(0.5, remaining))

        # Collect before stopping, so the measures end exactly at the run's end.
        latencies.poll(policy.latency)
        metrics = arm.metrics()
        counts = policy.counts
        followers = arm.followers
        histories = {name: f.history() for name, f in followers.items()}
        boundary = {
            name: [b.ratio for b in f.boundary_steps() if b.ratio is not None and b.t >= t0]
            for name, f in followers.items()
        }
        with record_lock:
            recorded_chunks = list(recorded)
        execute_horizon = policy.config.execute_horizon
    finally:
        with _sigint_masked():
            stop_spinning.set_result(None)
            for thread in spin_threads:
                thread.join(timeout=5.0)
            for executor in executors:
                pool = getattr(executor, "_executor", None)  # the MultiThreadedExecutor's
                if pool is not None:
                    pool.shutdown(wait=True)
                executor.shutdown(timeout_sec=5.0)
            for node in reversed(nodes):
                with contextlib.suppress(Exception):
                    node.destroy_node()
            if own_context and context is not None:
                with contextlib.suppress(Exception):
                    context.try_shutdown()
            server.stop()

    times, commanded, followed, switches = _merge_histories(histories, joints, column, t0)
    ages_p50 = [m.action_age_p50_s for m in metrics.values() if m.action_age_p50_s is not None]
    ages_max = [m.action_age_max_s for m in metrics.values() if m.action_age_max_s is not None]
    chunks = [
        CommandedChunk(stamp=stamp - t0, times=abs_times - t0, positions=positions)
        for stamp, abs_times, positions in recorded_chunks
        if stamp <= t_end
    ]
    dt = None
    if chunks and chunks[0].times.size > 1:
        dt = float(np.median(np.diff(chunks[0].times)))
    reasons: dict[str, int] = {}
    for m in metrics.values():
        for code, n in m.rejection_reasons.items():
            reasons[code] = reasons.get(code, 0) + n
    return DemoResult(
        model=model,
        request_mode=request_mode,
        latency_ms=float(latency_ms),
        jitter_ms=float(jitter_ms),
        duration_s=float(duration_s),
        execute_horizon=execute_horizon,
        dt=dt,
        requests=counts["requests"],
        chunks_received=counts["chunks_received"],
        chunks_published=counts["chunks_published"],
        refusals=counts["refusals"],
        error_replies=counts["error_replies"],
        latencies_s=np.asarray(latencies.samples, dtype=np.float64),
        stall_time_s=max((m.stall_time_s for m in metrics.values()), default=0.0),
        stall_events=max((m.stall_events for m in metrics.values()), default=0),
        boundary_steps={
            name: np.asarray(ratios, dtype=np.float64) for name, ratios in boundary.items()
        },
        action_age_p50_s=max(ages_p50) if ages_p50 else None,
        action_age_max_s=max(ages_max) if ages_max else None,
        accepted=sum(m.accepted for m in metrics.values()),
        rejected=sum(m.rejected for m in metrics.values()),
        rejection_reasons=reasons,
        joint_names=joints,
        joint_limits={j: tuple(config.joint_limits[j]) for j in joints},
        times=times,
        commanded=commanded,
        followed=followed,
        switch_times=switches,
        chunks=chunks,
        server_pid=server.pid,
    )


def _merge_histories(
    histories: Mapping[str, Any], joints: Sequence[str], column: Mapping[str, int], t0: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One time base for all controllers (they update in the same control cycle)."""
    n = min((len(h.times) for h in histories.values()), default=0)
    first = next(iter(histories.values()), None)
    times = first.times[-n:] if first is not None and n else np.zeros(0)
    commanded = np.full((times.size, len(joints)), np.nan)
    followed = np.full((times.size, len(joints)), np.nan)
    switches: list[float] = []
    for history in histories.values():
        for i, name in enumerate(history.joint_names):
            if name in column and n:
                commanded[:, column[name]] = history.commanded[-n:, i]
                followed[:, column[name]] = history.positions[-n:, i]
        switches.extend(float(t) for t in history.switch_times)
    keep = times >= t0 - _PRE_ROLL_S
    switch_array = np.unique(np.round(np.asarray(switches, dtype=np.float64), 3))
    switch_array = switch_array[switch_array >= t0] - t0
    return times[keep] - t0, commanded[keep], followed[keep], switch_array


# --------------------------------------------------------------------------- presentation


def _ms(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value * 1000:.{digits}f}"


def format_progress(p: DemoProgress) -> str:
    """One progress line (no newline), e.g.
    ``early   6.5/20.0 s  chunks 13  latency p50 81 ms  stall 0.000 s``."""
    if p.starting:
        return f"{p.request_mode:<5}  starting: waiting for the first chunk ..."
    return (
        f"{p.request_mode:<5} {p.elapsed_s:5.1f}/{p.duration_s:.1f} s  chunks {p.chunks:3d}  "
        f"latency p50 {_ms(p.latency_p50_s)} ms  stall {p.stall_time_s:.3f} s"
    )


def _summary_rows(r: DemoResult) -> list[tuple[str, str]]:
    share = 100.0 * r.stall_time_s / r.duration_s if r.duration_s > 0 else 0.0
    steps = []
    for name, ratios in r.boundary_steps.items():
        value = "n/a" if ratios.size == 0 else f"{np.median(ratios):.2f} / {ratios.max():.2f}"
        label = name.removesuffix("_controller")
        steps.append((f"boundary step {label} med / max", value))
    if r.action_age_p50_s is None:
        age = "n/a"
    else:
        age = f"{_ms(r.action_age_p50_s)} / {_ms(r.action_age_max_s)}"
    return [
        ("chunks (received/published)", f"{r.chunks_received} / {r.chunks_published}"),
        ("requests", str(r.requests)),
        ("latency p50 / p99 [ms]", f"{_ms(r.latency_p50_s)} / {_ms(r.latency_p99_s)}"),
        ("stall time [s]", f"{r.stall_time_s:.3f} ({share:.1f}%)"),
        ("stall events", str(r.stall_events)),
        *steps,
        ("action age p50 / max [ms]", age),
        ("rejected messages", str(r.rejected)),
        ("refused by the node", str(r.refusals)),
    ]


def format_summary(results: Sequence[DemoResult]) -> str:
    """The summary table of one or more runs side by side (one column per run).

    Raises:
        DemoArgumentError: ``results`` is empty.
    """
    if not results:
        raise DemoArgumentError("results is empty; expected at least one DemoResult")
    first = results[0]
    header = (
        f"relay_ros demo: {first.model}, simulated inference {first.latency_ms:g} ms "
        f"+/- {first.jitter_ms:g} ms"
    )
    if first.dt is not None:
        header += f", dt {first.dt * 1000:.1f} ms"
    if first.execute_horizon is not None:
        header += f", execute horizon {first.execute_horizon}"
    titles = [f"{r.request_mode} ({r.duration_s:g} s)" for r in results]
    rows = [_summary_rows(r) for r in results]
    labels = [label for label, _ in rows[0]]
    label_width = max(len(label) for label in labels)
    widths = [
        max(len(title), *(len(row[i][1]) for i in range(len(labels))))
        for title, row in zip(titles, rows)
    ]
    lines = [header, ""]
    lines.append(" " * label_width + "".join(f"  {t:>{w}}" for t, w in zip(titles, widths)))
    lines.append("-" * (label_width + sum(w + 2 for w in widths)))
    for i, label in enumerate(labels):
        cells = "".join(f"  {row[i][1]:>{w}}" for row, w in zip(rows, widths))
        lines.append(f"{label:<{label_width}}{cells}")
    for r in results:
        if r.rejection_reasons:
            reasons = ", ".join(f"{k}: {v}" for k, v in sorted(r.rejection_reasons.items()))
            lines.append(f"{r.request_mode}: rejections by reason: {reasons}")
    return "\n".join(lines)


_MODE_COLORS = {"early": "tab:blue", "sync": "tab:orange"}


def plot_demo(results: Sequence[DemoResult], path: str | os.PathLike[str]) -> Path:
    """Write the demo picture as a PNG and return its path.

    One column per run; one row per joint with the followed position (black), every
    published chunk (thin coloured lines, alternating colours, including the part a
    later chunk replaced), chunk switches (dotted verticals), holding periods (red
    bands) and the joint limits when they are near; a last row with the latency
    histograms of all runs.

    Raises:
        DemoArgumentError: ``results`` is empty or the runs have different joints.
    """
    if not results:
        raise DemoArgumentError("results is empty; expected at least one DemoResult")
    joints = results[0].joint_names
    for r in results[1:]:
        if r.joint_names != joints:
            raise DemoArgumentError(
                f"runs have different joints: {list(r.joint_names)} vs {list(joints)}"
            )
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    n_rows = len(joints) + 1
    n_cols = len(results)
    fig = Figure(figsize=(7.5 * n_cols, 1.5 * len(joints) + 3.2), layout="constrained")
    grid = fig.add_gridspec(n_rows, n_cols, height_ratios=[1.0] * len(joints) + [1.6])
    chunk_colors = ("tab:blue", "tab:green")
    for c, r in enumerate(results):
        stalls = stall_intervals(r)
        share = 100.0 * r.stall_time_s / r.duration_s if r.duration_s > 0 else 0.0
        axes = None
        for j, joint in enumerate(joints):
            ax = fig.add_subplot(grid[j, c], sharex=axes)
            axes = axes or ax
            for start, end in stalls:
                ax.axvspan(start, end, color="tab:red", alpha=0.15, lw=0)
            for t in r.switch_times:
                ax.axvline(t, color="0.6", lw=0.5, ls=":")
            for k, chunk in enumerate(r.chunks):
                ax.plot(
                    chunk.times,
                    chunk.positions[:, j],
                    color=chunk_colors[k % 2],
                    lw=0.9,
                    alpha=0.7,
                )
            ax.plot(r.times, r.followed[:, j], color="black", lw=1.4)
            data = [r.followed[:, j]] + [ch.positions[:, j] for ch in r.chunks]
            values = np.concatenate(data) if data else np.zeros(0)
            values = values[np.isfinite(values)]
            if values.size:
                low, high = float(values.min()), float(values.max())
                margin = max(0.15, 0.15 * (high - low))
                for limit in r.joint_limits[joint]:
                    if low - margin <= limit <= high + margin:
                        ax.axhline(limit, color="tab:red", lw=0.8, ls="--")
            ax.set_ylabel(joint, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.set_xlim(-_PRE_ROLL_S, r.duration_s)
            if j == 0:
                ax.set_title(
                    f"{r.request_mode} requests: stall {r.stall_time_s:.2f} s ({share:.0f}%), "
                    f"{r.chunks_published} chunks",
                    fontsize=10,
                )
            if j < len(joints) - 1:
                ax.tick_params(labelbottom=False)
            else:
                ax.set_xlabel("time since the first chunk [s]", fontsize=8)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Line2D([], [], color="black", lw=1.4, label="followed (/joint_states)"),
        Line2D([], [], color=chunk_colors[0], lw=0.9, label="commanded chunks (~/preview)"),
        Line2D([], [], color="0.6", lw=0.5, ls=":", label="chunk switch"),
        Patch(color="tab:red", alpha=0.15, label="holding (no future point)"),
        Line2D([], [], color="tab:red", lw=0.8, ls="--", label="joint limit"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=5, fontsize=8)

    hist = fig.add_subplot(grid[n_rows - 1, :])
    all_ms = np.concatenate([r.latencies_s for r in results]) * 1000.0
    if all_ms.size:
        bins = np.linspace(float(all_ms.min()) - 1.0, float(all_ms.max()) + 1.0, 40)
        for r in results:
            if r.latencies_s.size == 0:
                continue
            hist.hist(
                r.latencies_s * 1000.0,
                bins=bins,
                alpha=0.55,
                color=_MODE_COLORS.get(r.request_mode),
                label=f"{r.request_mode}: p50 {_ms(r.latency_p50_s)} ms, "
                f"p99 {_ms(r.latency_p99_s)} ms, n={r.latencies_s.size}",
            )
        hist.legend(fontsize=8)
    hist.set_xlabel("observation -> reply latency [ms]", fontsize=8)
    hist.set_ylabel("requests", fontsize=8)
    hist.tick_params(labelsize=7)
    fig.suptitle(
        f"relay_ros demo: {results[0].model}, server latency {results[0].latency_ms:g} "
        f"+/- {results[0].jitter_ms:g} ms; joint positions in rad (m for prismatic joints)",
        fontsize=11,
    )
    fig.savefig(out, dpi=100)
    return out


# --------------------------------------------------------------------------- command line


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _non_negative_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of milliseconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of milliseconds >= 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m relay_ros.demo`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m relay_ros.demo",
        description="Run the reference policy server, simulated cameras and arm and "
        "policy_node on this machine; compare early and synchronous requests; write a PNG.",
    )
    p.add_argument(
        "--model", choices=DEMO_MODELS, default="pi05", help="policy model (default %(default)s)"
    )
    p.add_argument(
        "--duration",
        type=_positive_seconds,
        default=20.0,
        help="seconds to run with early requests, from the first chunk (default %(default)g)",
    )
    p.add_argument(
        "--sync-duration",
        type=_positive_seconds,
        help="seconds to run with synchronous requests (default: the same as --duration)",
    )
    p.add_argument(
        "--no-sync", action="store_true", help="skip the synchronous-requests comparison run"
    )
    p.add_argument(
        "--latency-ms",
        type=_non_negative_ms,
        default=80.0,
        help="simulated inference latency of the server, ms (default %(default)g)",
    )
    p.add_argument(
        "--jitter-ms",
        type=_non_negative_ms,
        default=20.0,
        help="uniform extra latency in [-J, +J] ms (default %(default)g)",
    )
    p.add_argument(
        "--output-dir",
        type=Path,
        default=Path("demo_output"),
        help="where the PNG goes (default %(default)s)",
    )
    p.add_argument(
        "--visible",
        action="store_true",
        help="let other processes on this machine see the demo's topics (ros2 topic echo, "
        "rviz) on ROS_DOMAIN_ID; by default the demo's ROS graph stays inside this process, "
        "so it can never reach a real robot's controllers",
    )
    p.add_argument("--verbose", action="store_true", help="show the nodes' INFO logs")
    return p


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C so that every part is stopped."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise _Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; exit status 0, 1 on a demo error, 2 on bad arguments, 130 on Ctrl-C."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    if not args.visible:
        # Discovery off: the nodes only see each other (same process, same participant).
        os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "OFF"
    if not args.verbose:
        import rclpy.logging

        for name in (_POLICY_NODE, _CAMERAS_NODE, _ARM_NODE):
            # The summary reports refusals and rejections; start-up holds are expected.
            rclpy.logging.set_logger_level(name, rclpy.logging.LoggingSeverity.ERROR)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
    err = sys.stderr
    shown = [0]

    def show(p: DemoProgress) -> None:
        line = format_progress(p)
        err.write("\r" + line.ljust(shown[0]))
        err.flush()
        shown[0] = len(line)

    plan = [("early", args.duration)]
    if not args.no_sync:
        plan.append(("sync", args.sync_duration or args.duration))
    results: list[DemoResult] = []
    status = 0
    try:
        for mode, seconds in plan:
            results.append(
                run_demo(
                    args.model,
                    seconds,
                    request_mode=mode,
                    latency_ms=args.latency_ms,
                    jitter_ms=args.jitter_ms,
                    progress=show,
                )
            )
            err.write("\n")
            shown[0] = 0
    except KeyboardInterrupt:
        err.write("\ninterrupted: server, executor and nodes stopped\n")
        status = 130
    except DemoError as exc:
        err.write(f"\ndemo failed: {exc}\n")
        status = 1
    if results:
        sys.stdout.write(format_summary(results) + "\n")
        png = plot_demo(results, args.output_dir / f"demo_{args.model}.png")
        sys.stdout.write(f"\nplot: {png}\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
