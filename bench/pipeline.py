"""Camera-to-wire pipeline of ``policy_node``: latency per frame and request, and CPU share.

Usage (from the repository root)::

    .venv/bin/python bench/pipeline.py [--duration 30] [--scenarios raw,compressed]

Three simulated cameras (``base_0_rgb``, ``left_wrist_0_rgb``, ``right_wrist_0_rgb``)
publish 640x480 frames at 30 Hz, either all raw (``sensor_msgs/Image`` rgb8) or all
compressed (``sensor_msgs/CompressedImage`` jpeg); ``policy_node`` runs with
``config/pi05.yaml`` against the reference server and a simulated arm, at the node's
default ``execute_horizon`` (25 actions at 50 Hz: a request every 0.5 s; a smaller
one, e.g. ``--execute-horizon 5``, gives more requests per window).

Every part runs in its own process, so that the node's CPU share is its own:

- the reference server (``python -m relay_ros.server``, fixed simulated latency);
- the simulated arm (``python -m relay_ros.sim.arm_node``);
- the simulated cameras (``python -m relay_ros.sim.cameras_node``), one process per
  scenario;
- the node: this script with ``--node-process``, which builds `PolicyNode` and spins
  it with a ``SingleThreadedExecutor`` exactly as ``policy_node``'s ``main()`` does,
  plus one sampler thread that copies the node's ``pipeline_timing`` samples to
  stdout every 0.25 s (the node keeps only its last 100 samples per measure, which
  is what ``/diagnostics`` reports; the bench wants all of them).

What the node measures (``PolicyNode.pipeline_timing``, ``time.perf_counter``):

- ``frame_processing``: per frame conversion (decode or convert, resize with
  padding, JPEG with ``image_encoding: jpeg``). The node converts only the frames an
  observation uses: a frame that arrives when a request is due before its camera's
  next frame, or the newest one of each camera when the request is assembled
  (``relay_ros.pipeline.camera_frames``); the table shows how many conversions per
  second that is next to the frames received;
- ``request_to_wire``: per request, from the start of the request's tick (the
  frames it reads and converts) until the observation is fully written to the socket
  (assembly, hand-off to the connection worker, framing, ``sendall``);
- ``image_to_wire``: per request, the newest frame's processing (read and
  conversion) when it was done on an earlier tick, plus ``request_to_wire`` (which
  includes the frames read and converted on the request's own tick, counted once):
  how long after that frame was taken from the middleware the observation would be
  on the wire if the request fired at once.

The node's CPU share is read from ``/proc/<pid>/stat`` (``utime + stime`` of all its
threads, DDS included) over the measured window, after a warm-up. The bench also
subscribes to ``/diagnostics`` and shows the node's own rolling p50/p99 there as a
cross-check, and how long the node's threads waited for a CPU (``schedstat``).
Everything runs on a private ``ROS_DOMAIN_ID`` with discovery on localhost, and with a
Fast DDS profile whose 16 MiB shared-memory segment fits a raw 640x480 frame (the
default 512 KiB segment lost most of them); every process started is stopped at the
end, also on Ctrl-C.

Other modes and knobs (``--help``): ``--conversions`` times the node's frame
conversion in this process without ROS; ``--rate-hz``, ``--joint-states-hz`` and
``--node-param NAME:=VALUE`` change the load; the what-if flag
``--switch-interval-ms`` patches the node process only, to measure a proposed change
before it is made. JPEG on the wire: ``--node-param image_encoding:=jpeg``; the node's process
under ``SCHED_FIFO`` (needs root or an rtprio limit, docs/node.md):
``--node-param thread_priority:=20``. Results and their reading: docs/benchmarks.md,
"Pipeline".

The node reads its cameras and joint states itself, on its tick, instead of
having the executor push every message (``relay_ros.node.polled``): the table's
"frames/s read" is how many frames it took from the middleware (of the 90 published),
"ticks/s" how often its scheduling tick ran (it runs when the core has work, at
least every 100 ms).

Goals: image->wire p99 under 5 ms; node CPU at most 12 % of one core with raw and
10 % with compressed cameras at the default execute horizon (25), under 25 % at
``--execute-horizon 5``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("raw", "compressed")
CAMERA_KEYS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
MEASURES = ("frame_processing", "request_to_wire", "image_to_wire")
NODE_NAME = "bench_policy_node"
TOPIC_PREFIX = "/bench_pipeline"
WIDTH, HEIGHT, RATE_HZ = 640, 480, 30.0
SAMPLE_INTERVAL_S = 0.25
# Valid Linux ROS domain ids are 0..101 and 215..232; the test suite draws from 1..100.
DOMAIN_IDS = range(215, 233)

# Fast DDS (rclpy's default RMW) sends same-host data through shared-memory segments of
# 512 KiB by default; a 640x480 rgb8 frame is 900 KiB, and at 3 x 30 Hz most of them were
# lost (11-15 of 30 frames/s per camera received). Camera pipelines use a larger segment;
# every process of the bench gets this profile unless FASTRTPS_DEFAULT_PROFILES_FILE is set.
FASTDDS_PROFILE = """<?xml version="1.0" encoding="UTF-8" ?>
<profiles xmlns="http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles">
  <transport_descriptors>
    <transport_descriptor>
      <transport_id>shm_large</transport_id>
      <type>SHM</type>
      <segment_size>16777216</segment_size>
      <maxMessageSize>4194304</maxMessageSize>
    </transport_descriptor>
    <transport_descriptor>
      <transport_id>udp</transport_id>
      <type>UDPv4</type>
    </transport_descriptor>
  </transport_descriptors>
  <participant profile_name="bench_pipeline" is_default_profile="true">
    <rtps>
      <userTransports>
        <transport_id>shm_large</transport_id>
        <transport_id>udp</transport_id>
      </userTransports>
      <useBuiltinTransports>false</useBuiltinTransports>
    </rtps>
  </participant>
</profiles>
"""

_START = time.monotonic()


class BenchError(RuntimeError):
    """A part of the bench did not start or stopped early (the message has its log tail)."""


def progress(message: str) -> None:
    """One progress line with the time since the bench started."""
    print(f"[{time.monotonic() - _START:6.1f} s] {message}", flush=True)


# --------------------------------------------------------------------------- node process


def _read_new_samples(stats: Any, seen: int) -> tuple[list[float], int, int]:
    """Samples added to a LatencyStats since ``seen`` were counted: (new values, count, lost).

    Reads count, window and count again so that a sample added in between (from the
    executor thread) is neither duplicated nor missed.
    """
    while True:
        before = stats.count
        values = stats.values()
        if stats.count == before:
            break
    new = before - seen
    lost = max(0, new - len(values))
    return (values[-new:] if new > 0 else []), before, lost


def run_node_process(
    ros_args: list[str],
    interval_s: float,
    *,
    switch_interval_s: float | None = None,
) -> int:
    """``--node-process``: PolicyNode on a SingleThreadedExecutor, samples to stdout.

    Every ``interval_s`` one JSON line: ``{"t": monotonic s, "samples": {measure:
    [seconds, ...]}, "lost": {measure: n}, "counts": {...}, "hold": str|null}``.
    ``switch_interval_s`` is a what-if experiment (see ``--help``); by default the node
    runs unchanged.
    """
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    from relay_ros.node.policy_node import PolicyNode, freeze_startup_heap

    if switch_interval_s is not None:
        sys.setswitchinterval(switch_interval_s)

    rclpy.init(args=["pipeline-node", *ros_args])
    node: PolicyNode | None = None
    stop = threading.Event()

    def sample() -> None:
        assert node is not None
        timing = node.pipeline_timing
        seen = dict.fromkeys(MEASURES, 0)
        while not stop.wait(interval_s):
            line: dict[str, Any] = {"samples": {}, "lost": {}}
            for name in MEASURES:
                values, seen[name], lost = _read_new_samples(timing[name], seen[name])
                line["samples"][name] = values
                line["lost"][name] = lost
            line["t"] = time.monotonic()
            line["counts"] = {**node.counts, "ticks": node.ticks}
            line["hold"] = node.hold_reason
            try:
                sys.stdout.write(json.dumps(line) + "\n")
                sys.stdout.flush()
            except (BrokenPipeError, ValueError):
                return

    sampler: threading.Thread | None = None
    try:
        node = PolicyNode(NODE_NAME)
        freeze_startup_heap()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        sampler = threading.Thread(target=sample, name="pipeline-sampler", daemon=True)
        sampler.start()
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        stop.set()
        if sampler is not None:
            sampler.join(2.0)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


# --------------------------------------------------------------------------- processes


class Child:
    """A subprocess in its own session (Ctrl-C reaches only the bench), log in a file."""

    def __init__(
        self, name: str, command: list[str], log_path: Path, *, pipe: bool = False
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipe else self._log,
            stderr=self._log,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        """Process id."""
        return self.process.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self.process.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines of its log."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def stop(self) -> None:
        """SIGINT (clean ROS shutdown), then SIGTERM, then SIGKILL; always reaped."""
        for sig, wait_s in ((signal.SIGINT, 5.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            if self.process.poll() is not None:
                break
            try:
                self.process.send_signal(sig)
                self.process.wait(wait_s)
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                break
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all threads) in seconds, from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields after "pid (comm)": state is index 0, utime 11, stime 12 (stat fields 14, 15).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def runqueue_wait_seconds(pid: int) -> float:
    """Time the threads of a process spent runnable but waiting for a CPU, in seconds.

    Sum over ``/proc/<pid>/task/*/schedstat`` (second field, ns); threads that ended
    are not counted. A measure of how much other load on the machine delayed them.
    """
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def write_params(path: Path, params: dict[str, Any]) -> Path:
    """A ROS 2 params file applying ``params`` to every node."""
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}, sort_keys=False))
    return path


# --------------------------------------------------------------------------- one scenario


@dataclass
class ScenarioResult:
    """Everything measured in one scenario's window (seconds unless named otherwise)."""

    scenario: str
    window_s: float
    samples: dict[str, list[float]]
    lost: int
    cpu_share: float
    requests: int
    chunks_published: int
    frames_received: int = 0
    ticks: int = 0
    holds: list[str] = field(default_factory=list)
    other_cpu: dict[str, float] = field(default_factory=dict)
    sampler_lines: int = 0
    runqueue_wait: float = 0.0
    load_average: float = 0.0
    diagnostics: dict[str, str] = field(default_factory=dict)

    def percentile_ms(self, measure: str, q: float) -> float | None:
        """The ``q``-th percentile of one measure in ms, or None without samples."""
        values = self.samples[measure]
        return float(np.percentile(values, q)) * 1000.0 if values else None


class NodeOutput:
    """Reads the node process's JSON lines in a thread."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            text = raw.decode("utf-8", errors="replace").strip()
            if not text.startswith("{"):
                continue
            try:
                line = json.loads(text)
            except json.JSONDecodeError:
                continue
            with self._lock:
                self.lines.append(line)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every line read so far, oldest first."""
        with self._lock:
            return list(self.lines)

    def latest(self) -> dict[str, Any] | None:
        """The newest line, or None before the first."""
        with self._lock:
            return self.lines[-1] if self.lines else None


class DiagnosticsListener:
    """The latest /diagnostics status of the node, from a subscription in this process."""

    def __init__(self) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        self._rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node("bench_pipeline_listener", context=self.context)
        self._latest: dict[str, str] = {}
        self._lock = threading.Lock()
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # noqa: BLE001 - shutdown races end the spin thread quietly
            return

    def _on_diagnostics(self, msg: Any) -> None:
        for status in msg.status:
            if status.name == f"/{NODE_NAME}: policy":  # not its recording's status
                with self._lock:
                    self._latest = {kv.key: kv.value for kv in status.values}
                    self._latest["message"] = status.message

    def latest(self) -> dict[str, str]:
        """Key/value pairs of the node's newest status ({} before the first)."""
        with self._lock:
            return dict(self._latest)

    def clear(self) -> None:
        """Forget the last status (a new node is starting)."""
        with self._lock:
            self._latest = {}

    def close(self) -> None:
        """Stop spinning and shut the private context down."""
        self.executor.shutdown(timeout_sec=2.0)
        self.node.destroy_node()
        self._rclpy.try_shutdown(context=self.context)
        self._thread.join(2.0)


def camera_name(key: str) -> str:
    """``left_wrist_0_rgb`` -> ``left_wrist``: the simulated camera's name."""
    return key.removesuffix("_0_rgb")


def run_scenario(
    scenario: str,
    *,
    tmp: Path,
    server_port: int,
    execute_horizon: int,
    warmup_s: float,
    duration_s: float,
    listener: DiagnosticsListener,
    children: list[Child],
    node_flags: Sequence[str] = (),
    rate_hz: float = RATE_HZ,
    node_params: dict[str, Any] | None = None,
) -> ScenarioResult:
    """Start cameras and node for one scenario, measure one window, stop both."""
    compressed = scenario == "compressed"
    suffix = "/image_raw/compressed" if compressed else "/image_raw"
    topics = {key: f"{TOPIC_PREFIX}/{camera_name(key)}{suffix}" for key in CAMERA_KEYS}

    camera_map = tmp / f"cameras_{scenario}.yaml"
    camera_map.write_text(
        yaml.safe_dump(
            {
                key: {"topic": topic, "transport": "compressed" if compressed else "raw"}
                for key, topic in topics.items()
            },
            sort_keys=False,
        )
    )
    camera_params: dict[str, Any] = {"camera_names": [camera_name(k) for k in CAMERA_KEYS]}
    for key, topic in topics.items():
        name = camera_name(key)
        camera_params[f"cameras.{name}.topic"] = topic
        camera_params[f"cameras.{name}.format"] = scenario
        camera_params[f"cameras.{name}.width"] = WIDTH
        camera_params[f"cameras.{name}.height"] = HEIGHT
        camera_params[f"cameras.{name}.rate_hz"] = rate_hz
    cameras_file = write_params(tmp / f"sim_cameras_{scenario}.yaml", camera_params)
    node_file = write_params(
        tmp / f"node_{scenario}.yaml",
        {
            "policy_url": f"ws://127.0.0.1:{server_port}/pi05",
            "camera_map": str(camera_map),
            "joint_states_topic": f"{TOPIC_PREFIX}/joint_states",
            "execute_horizon": execute_horizon,
            **(node_params or {}),
        },
    )

    cameras = Child(
        f"sim_cameras ({scenario})",
        [sys.executable, "-m", "relay_ros.sim.cameras_node", "--ros-args"]
        + ["--params-file", str(cameras_file)],
        tmp / f"sim_cameras_{scenario}.log",
    )
    children.append(cameras)
    node = Child(
        f"policy node ({scenario})",
        [sys.executable, str(Path(__file__).resolve()), "--node-process", *node_flags]
        + ["--ros-args"]
        + ["--params-file", str(ROOT / "config" / "pi05.yaml")]
        + ["--params-file", str(node_file)],
        tmp / f"node_{scenario}.log",
        pipe=True,
    )
    children.append(node)
    assert node.process.stdout is not None
    output = NodeOutput(node.process.stdout)
    listener.clear()
    try:
        progress(f"{scenario}: node pid {node.pid}, cameras pid {cameras.pid}; waiting for chunks")
        deadline = time.monotonic() + 60.0
        while True:
            for child in (node, cameras):
                if not child.alive():
                    raise BenchError(
                        f"{child.name} exited with status {child.process.returncode}:\n"
                        f"{child.log_tail()}"
                    )
            latest = output.latest()
            if latest is not None and latest["counts"].get("chunks_published", 0) > 0:
                break
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{scenario}: the node published no chunk within 60 s; last state "
                    f"{latest}\nnode log:\n{node.log_tail()}"
                )
            time.sleep(0.2)
        progress(f"{scenario}: streaming; warming up for {warmup_s:g} s")
        time.sleep(warmup_s)

        others = [c for c in children if c is not node and c.alive()]
        t0 = time.monotonic()
        cpu0 = cpu_seconds(node.pid)
        wait0 = runqueue_wait_seconds(node.pid)
        others0 = [cpu_seconds(c.pid) for c in others]
        end = t0 + duration_s
        next_report = t0 + 5.0
        while (now := time.monotonic()) < end:
            time.sleep(min(0.2, end - now))
            if not node.alive():
                raise BenchError(f"{node.name} exited during the window:\n{node.log_tail()}")
            if time.monotonic() >= next_report:
                next_report += 5.0
                elapsed = time.monotonic() - t0
                cpu = (cpu_seconds(node.pid) - cpu0) / elapsed
                lines = [ln for ln in output.snapshot() if ln["t"] > t0]
                frames = (
                    lines[-1]["counts"]["frames_received"] - lines[0]["counts"]["frames_received"]
                    if len(lines) >= 2
                    else 0
                )
                requests = sum(len(ln["samples"]["request_to_wire"]) for ln in lines)
                progress(
                    f"{scenario}: {elapsed:4.1f}/{duration_s:g} s, {frames / elapsed:5.1f} "
                    f"frames/s, {requests} requests, node CPU {100 * cpu:4.1f} % "
                    f"(load average {os.getloadavg()[0]:.2f})"
                )
        t1 = time.monotonic()
        cpu1 = cpu_seconds(node.pid)
        runqueue_wait = (runqueue_wait_seconds(node.pid) - wait0) / (t1 - t0)
        other_cpu = {
            c.name: (cpu_seconds(c.pid) - before) / (t1 - t0) for c, before in zip(others, others0)
        }
        load = os.getloadavg()[0]
        time.sleep(SAMPLE_INTERVAL_S * 2 + 0.1)  # let the sampler report up to t1
        diagnostics = listener.latest()
    finally:
        node.stop()
        cameras.stop()

    # The window is bounded by sampler lines: samples of lines in (first, last] after t0/t1.
    lines = output.snapshot()
    inside = [ln for ln in lines if t0 <= ln["t"] <= t1 + SAMPLE_INTERVAL_S]
    if len(inside) < 2:
        raise BenchError(f"{scenario}: the node reported {len(inside)} samples in the window")
    first, measured = inside[0], inside[1:]
    samples = {m: [v for ln in measured for v in ln["samples"][m]] for m in MEASURES}
    lost = sum(n for ln in measured for n in ln["lost"].values())
    holds = [ln["hold"] for ln in measured if ln["hold"]]
    last = measured[-1]
    return ScenarioResult(
        scenario=scenario,
        window_s=last["t"] - first["t"],
        samples=samples,
        lost=lost,
        cpu_share=(cpu1 - cpu0) / (t1 - t0),
        requests=len(samples["request_to_wire"]),
        chunks_published=last["counts"]["chunks_published"] - first["counts"]["chunks_published"],
        frames_received=last["counts"]["frames_received"] - first["counts"]["frames_received"],
        ticks=last["counts"]["ticks"] - first["counts"]["ticks"],
        holds=holds,
        sampler_lines=len(measured),
        runqueue_wait=runqueue_wait,
        diagnostics=diagnostics,
        other_cpu=other_cpu,
        load_average=load,
    )


# --------------------------------------------------------------------------- conversions


def conversion_table(iterations: int = 300, target: tuple[int, int] = (224, 224)) -> str:
    """Per-frame conversion time of 640x480 frames to 224x224, as the node converts them.

    In this process, without ROS: ``relay_ros.pipeline.images`` (raw frames halved
    first, JPEGs decoded at half size, then ``resize_with_pad``). Two JPEG inputs: the
    simulated scene (smooth, small JPEGs) and the scene with Gaussian sensor noise
    (sigma 4), whose JPEGs are the size of a real camera's.
    """
    from types import SimpleNamespace

    from relay_ros.pipeline.images import compressed_to_rgb, image_to_rgb, resize_with_pad
    from relay_ros.sim.scene import SceneRenderer, encode_jpeg

    height, width = target
    renderer = SceneRenderer(WIDTH, HEIGHT, seed=0, camera_name="base")
    rng = np.random.default_rng(0)
    scenes = [renderer.render(i / RATE_HZ) for i in range(30)]
    noisy = [np.clip(f + rng.normal(0.0, 4.0, f.shape), 0, 255).astype(np.uint8) for f in scenes]

    def raw_msg(frame: np.ndarray) -> Any:
        return SimpleNamespace(
            height=HEIGHT,
            width=WIDTH,
            encoding="rgb8",
            is_bigendian=0,
            step=WIDTH * 3,
            data=frame.tobytes(),
        )

    def jpeg_msg(frame: np.ndarray) -> Any:
        return SimpleNamespace(format="jpeg", data=encode_jpeg(frame, 90))

    def raw(msg: Any) -> np.ndarray:
        return resize_with_pad(image_to_rgb(msg), height, width)

    def jpeg(msg: Any) -> np.ndarray:
        return resize_with_pad(compressed_to_rgb(msg, target_size=target), height, width)

    cases = [
        ("raw rgb8", "scene", [raw_msg(f) for f in scenes], raw),
        ("jpeg", "scene", [jpeg_msg(f) for f in scenes], jpeg),
        ("jpeg", "scene + noise", [jpeg_msg(f) for f in noisy], jpeg),
    ]
    rows = ["| input | frames | p50 (ms) | p99 (ms) |", "|---|---|---:|---:|"]
    for kind, label, msgs, convert in cases:
        times = []
        for i in range(iterations):
            msg = msgs[i % len(msgs)]
            start = time.perf_counter()
            convert(msg)
            times.append(time.perf_counter() - start)
        size = f", {np.mean([len(m.data) for m in msgs]) / 1024:.0f} KiB" if kind == "jpeg" else ""
        p50, p99 = np.percentile(np.asarray(times) * 1000.0, [50, 99])
        rows.append(f"| {kind}{size} | {label} | {p50:.2f} | {p99:.2f} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- output


def _pair(result: ScenarioResult, measure: str) -> str:
    p50 = result.percentile_ms(measure, 50)
    p99 = result.percentile_ms(measure, 99)
    if p50 is None or p99 is None:
        return "-"
    return f"{p50:.2f} / {p99:.2f}"


def format_table(results: Sequence[ScenarioResult]) -> str:
    """The result table (Markdown), then one cross-check line per scenario."""
    header = (
        "| scenario | frames/s read | conversions/s | ticks/s | frame processing p50 / p99 (ms) "
        "| request->wire p50 / p99 (ms) | image->wire p50 / p99 (ms) | "
        "node CPU (% of one core) | requests |"
    )
    rows = [header, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        frames = r.frames_received / r.window_s
        conversions = len(r.samples["frame_processing"]) / r.window_s
        rows.append(
            f"| {r.scenario} | {frames:.1f} | {conversions:.1f} | {r.ticks / r.window_s:.1f} | "
            f"{_pair(r, 'frame_processing')} | "
            f"{_pair(r, 'request_to_wire')} | {_pair(r, 'image_to_wire')} | "
            f"{100 * r.cpu_share:.1f} | {r.requests} |"
        )
    notes = []
    for r in results:
        d = r.diagnostics
        notes.append(
            f"{r.scenario}: {r.window_s:.1f} s window, {r.chunks_published} chunks published, "
            f"{r.lost} samples lost"
            + (
                f", holding position in {len(r.holds)} of {r.sampler_lines} samples "
                f"(first reason: {r.holds[0][:100]})"
                if r.holds
                else ", never held"
            )
            + "; /diagnostics (last 100 samples): image->wire p50/p99 "
            f"{d.get('image_to_wire_p50_ms', '?')}/{d.get('image_to_wire_p99_ms', '?')} ms, "
            f"frame processing p99 {d.get('frame_processing_p99_ms', '?')} ms, "
            f"inference latency p50 {d.get('latency_p50_ms', '?')} ms, scheduling "
            f"{d.get('thread priority', '?')[:90]}; CPU of the other "
            "processes: "
            + ", ".join(f"{name} {100 * share:.0f} %" for name, share in r.other_cpu.items())
            + f"; node threads waited {1000 * r.runqueue_wait:.0f} ms/s for a CPU; "
            f"1-min load average {r.load_average:.2f}"
        )
    return "\n".join(rows) + "\n\n" + "\n".join(notes)


# --------------------------------------------------------------------------- harness


def prepare_environment(args: argparse.Namespace) -> tuple[int, Path, str]:
    """A private ROS domain on localhost, SIGTERM like Ctrl-C, a temp directory and the
    Fast DDS profile: ``(domain, tmp, transport description)``."""
    domain = args.domain_id if args.domain_id is not None else random.choice(DOMAIN_IDS)
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["RCUTILS_LOGGING_USE_STDOUT"] = "0"
    signal.signal(signal.SIGTERM, _interrupt)
    # Also when started in the background, where SIGINT is inherited as ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tmp = Path(tempfile.mkdtemp(prefix="relay_pipeline_"))
    if args.fastdds_defaults:
        transport = "Fast DDS default transports"
    elif "FASTRTPS_DEFAULT_PROFILES_FILE" in os.environ:
        transport = f"Fast DDS profile {os.environ['FASTRTPS_DEFAULT_PROFILES_FILE']}"
    else:
        (tmp / "fastdds.xml").write_text(FASTDDS_PROFILE)
        os.environ["FASTRTPS_DEFAULT_PROFILES_FILE"] = str(tmp / "fastdds.xml")
        transport = "Fast DDS shared memory with 16 MiB segments"
    return domain, tmp, transport


def parse_node_params(items: Sequence[str]) -> dict[str, Any]:
    """``--node-param NAME:=VALUE`` items as a dict (YAML values)."""
    node_params: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition(":=")
        if not sep or not name:
            raise SystemExit(f"--node-param {item!r}: expected NAME:=VALUE, e.g. tick_hz:=50")
        node_params[name] = yaml.safe_load(value)
    return node_params


def start_server_and_arm(tmp: Path, children: list[Child], args: argparse.Namespace) -> int:
    """The reference server and the simulated arm (appended to ``children``); the port."""
    port_file = tmp / "port"
    server = Child(
        "policy server",
        [sys.executable, "-m", "relay_ros.server", "--host", "127.0.0.1", "--port", "0"]
        + ["--port-file", str(port_file), "--model", "pi05", "--idle-timeout-s", "0"]
        + ["--latency-ms", f"{args.server_latency_ms:g}", "--jitter-ms", "0"]
        + ["--log-level", "WARNING"],
        tmp / "server.log",
    )
    children.append(server)
    arm = Child(
        "sim_arm",
        [sys.executable, "-m", "relay_ros.sim.arm_node", "--ros-args", "--params-file"]
        + [
            str(
                write_params(
                    tmp / "sim_arm.yaml",
                    {
                        "controller_names": ["arm_controller", "gripper_controller"],
                        "controllers.arm_controller.joints": [f"joint{i}" for i in range(1, 7)],
                        "joint_states_topic": f"{TOPIC_PREFIX}/joint_states",
                        "metrics_rate_hz": 0.0,
                        "joint_states_rate_hz": args.joint_states_hz,
                    },
                )
            )
        ],
        tmp / "sim_arm.log",
    )
    children.append(arm)
    deadline = time.monotonic() + 30.0
    while not (port_file.exists() and port_file.read_text().strip()):
        if not server.alive() or time.monotonic() > deadline:
            raise BenchError(f"the policy server did not start:\n{server.log_tail()}")
        time.sleep(0.05)
    port = int(port_file.read_text().strip())
    progress(f"server pid {server.pid} on port {port}, sim_arm pid {arm.pid}")
    return port


def stop_all(
    children: list[Child], listener: DiagnosticsListener | None, tmp: Path, *, keep_logs: bool
) -> None:
    """Stop every child (newest first) and the listener; remove ``tmp`` unless kept."""
    for child in reversed(children):
        child.stop()
    if listener is not None:
        listener.close()
    if keep_logs:
        progress(f"logs kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- main


def _scenarios(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in SCENARIOS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"scenarios {text!r}: expected a comma-separated subset of {list(SCENARIOS)}"
        )
    return names


def _cpu_goals(execute_horizon: int) -> dict[str, float]:
    """Node CPU goal per scenario (share of one core): 12 % raw and 10 % compressed
    at the default execute horizon (issue 11), 25 % at any other (issue 3)."""
    if execute_horizon == 25:
        return {"raw": 0.12, "compressed": 0.10}
    return dict.fromkeys(SCENARIOS, 0.25)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n", 1)[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=30.0, help="measured s per scenario")
    parser.add_argument("--warmup", type=float, default=3.0, help="s after the first chunk")
    parser.add_argument(
        "--scenarios", type=_scenarios, default=list(SCENARIOS), help="raw,compressed"
    )
    parser.add_argument(
        "--execute-horizon",
        type=int,
        default=25,
        help="actions per chunk (50 Hz) between requests (25: the node's default)",
    )
    parser.add_argument("--rate-hz", type=float, default=RATE_HZ, help="frames/s per camera")
    parser.add_argument(
        "--joint-states-hz", type=float, default=100.0, help="rate of the simulated arm"
    )
    parser.add_argument(
        "--node-param",
        action="append",
        default=[],
        metavar="NAME:=VALUE",
        help="extra policy_node parameter (YAML value), e.g. tick_hz:=50; repeatable",
    )
    parser.add_argument(
        "--server-latency-ms", type=float, default=20.0, help="simulated inference time"
    )
    parser.add_argument("--domain-id", type=int, default=None, help="default: random 215..232")
    parser.add_argument("--keep-logs", action="store_true", help="print the temp dir, keep it")
    parser.add_argument(
        "--fastdds-defaults",
        action="store_true",
        help="keep Fast DDS's default transports (512 KiB shared-memory segments) instead of "
        "the bench's 16 MiB segment profile",
    )
    parser.add_argument(
        "--conversions",
        action="store_true",
        help="only time the node's frame conversion in this process (no ROS)",
    )
    what_if = parser.add_argument_group(
        "what-if experiments (change the node process; not how policy_node runs)"
    )
    what_if.add_argument(
        "--switch-interval-ms",
        type=float,
        default=None,
        help="sys.setswitchinterval in the node process (Python's default: 5 ms)",
    )
    return parser


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM stops the bench like Ctrl-C: every child is stopped in ``finally``."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--node-process":
        split = argv.index("--ros-args")
        what_if = build_parser().parse_args(argv[1:split])
        return run_node_process(
            argv[split:],
            SAMPLE_INTERVAL_S,
            switch_interval_s=None
            if what_if.switch_interval_ms is None
            else what_if.switch_interval_ms / 1000.0,
        )
    args = build_parser().parse_args(argv)
    if args.conversions:
        print(
            f"conversion of one {WIDTH}x{HEIGHT} frame to 224x224 in this process "
            f"(no ROS), {os.cpu_count()} cores\n"
        )
        print(conversion_table())
        return 0
    if min(args.duration, args.rate_hz, args.joint_states_hz) <= 0 or args.warmup < 0:
        raise SystemExit("--duration, --rate-hz, --joint-states-hz must be > 0, --warmup >= 0")
    if args.execute_horizon < 1:
        raise SystemExit(f"--execute-horizon {args.execute_horizon}: expected >= 1")

    domain, tmp, transport = prepare_environment(args)
    node_params = parse_node_params(args.node_param)
    node_flags: list[str] = []
    if args.switch_interval_ms is not None:
        node_flags += ["--switch-interval-ms", f"{args.switch_interval_ms:g}"]

    children: list[Child] = []
    listener: DiagnosticsListener | None = None
    results: list[ScenarioResult] = []
    try:
        progress(
            f"ROS_DOMAIN_ID={domain}; {len(CAMERA_KEYS)} cameras {WIDTH}x{HEIGHT} at "
            f"{args.rate_hz:g} Hz; execute_horizon {args.execute_horizon}; joint states at "
            f"{args.joint_states_hz:g} Hz; {transport}; logs in {tmp}"
            + (f"; node parameters {node_params}" if node_params else "")
            + (f"; what-if {' '.join(node_flags)}" if node_flags else "")
        )
        port = start_server_and_arm(tmp, children, args)
        listener = DiagnosticsListener()

        for scenario in args.scenarios:
            results.append(
                run_scenario(
                    scenario,
                    tmp=tmp,
                    server_port=port,
                    execute_horizon=args.execute_horizon,
                    warmup_s=args.warmup,
                    duration_s=args.duration,
                    listener=listener,
                    children=children,
                    node_flags=node_flags,
                    rate_hz=args.rate_hz,
                    node_params=node_params,
                )
            )
            progress(f"{scenario}: done")
    except KeyboardInterrupt:
        progress("interrupted; stopping every process")
        return 130
    finally:
        stop_all(children, listener, tmp, keep_logs=args.keep_logs)

    print()
    print(
        f"policy_node pipeline: {len(CAMERA_KEYS)} cameras {WIDTH}x{HEIGHT} at "
        f"{args.rate_hz:g} Hz, "
        f"pi05, execute_horizon {args.execute_horizon} at 50 Hz, {args.duration:g} s per "
        f"scenario after {args.warmup:g} s warm-up; joint states at {args.joint_states_hz:g} Hz; "
        f"{transport}; machine: {os.cpu_count()} cores"
        + (f"; node parameters {node_params}" if node_params else "")
        + (f"; what-if {' '.join(node_flags)}" if node_flags else "")
    )
    print()
    print(format_table(results))
    print()
    worst = max(
        (r.percentile_ms("image_to_wire", 99) or 0.0 for r in results),
        default=0.0,
    )
    cpu_goals = _cpu_goals(args.execute_horizon)
    cpu_text = "; ".join(
        f"node CPU with {r.scenario} cameras {100 * r.cpu_share:.1f} % <= "
        f"{100 * goal:g} % ({'met' if r.cpu_share <= goal else 'missed'})"
        for r in results
        for goal in [cpu_goals[r.scenario]]
    )
    print(
        f"goals: image->wire p99 < 5 ms: worst {worst:.2f} ms "
        f"({'met' if worst < 5.0 else 'missed'}); {cpu_text}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
