"""The running part of a replay: policy node, monitor, recorder, player, on one executor.

:class:`ReplaySession` starts policy_node (dry run, bag time) with the plan's
parameters, a monitor node sampling it (:class:`~relay_ros.bag.replay_monitor.ReplayMonitor`)
and a :class:`~relay_ros.bag.recorder.BagRecorder` for its outputs, spun by one
``SingleThreadedExecutor`` in a thread (rclpy 7.1's MultiThreadedExecutor skips
timer periods, see ``policy_node``); :meth:`~ReplaySession.play` plays the bag
with ``/clock``; :meth:`~ReplaySession.finish` collects a :class:`ReplayOutcome`;
:meth:`~ReplaySession.close` stops whatever was started. rclpy is imported when a
session starts.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from relay_ros.bag.reader import BagError
from relay_ros.bag.replay_inputs import BagInput, ReplayError
from relay_ros.bag.replay_monitor import ReplayMonitor
from relay_ros.bag.replay_plan import ReplayPlan
from relay_ros.bag.replay_report import HoldPeriod

__all__ = ["ReplayOutcome", "ReplayProgress", "ReplaySession", "ros_context"]

_LOG = logging.getLogger(__name__)

_TRAJECTORY_TYPE = "trajectory_msgs/msg/JointTrajectory"
_DIAGNOSTICS_TYPE = "diagnostic_msgs/msg/DiagnosticArray"


@dataclass(frozen=True)
class ReplayProgress:
    """What :func:`replay` reports to its ``progress`` callback, about twice a second."""

    bag_time_s: float
    duration_s: float
    fraction: float
    played: Mapping[str, int]
    chunks: int
    requests: int
    hold_reason: str | None


@contextlib.contextmanager
def ros_context(context: Any) -> Iterator[Any]:
    """``context``, or a new rclpy context shut down on exit."""
    if context is not None:
        yield context
        return
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    ctx = rclpy.context.Context()
    # Without rclpy's handlers: they would shut the context down from their own thread
    # on Ctrl-C while the session still uses it; relay-ros stops it (relay_ros.cli).
    rclpy.init(context=ctx, signal_handler_options=SignalHandlerOptions.NO)
    try:
        yield ctx
    finally:
        rclpy.shutdown(context=ctx)


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@dataclass
class ReplayOutcome:
    """What the running replay measured, read once everything has stopped."""

    preview_topic: str
    played: dict[str, int]
    recorded: dict[str, int]
    hold_periods: list[HoldPeriod]
    refusals: dict[str, int]
    counts: dict[str, int]
    latency_ms: dict[str, float | None]
    diagnostics: dict[str, str]


class ReplaySession:
    """The running parts: policy node, monitor node, recorder, executor thread, player.

    :meth:`close` stops and destroys whatever was started, in reverse order, also
    after a failure half-way.
    """

    def __init__(self, plan: ReplayPlan, context: Any, server_url: str) -> None:
        # rclpy and the nodes load only when a replay runs: the checks before it
        # (relay_ros.bag.replay's plain-Python part) work without ROS.
        from rclpy.clock import Clock, ClockType
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.parameter import Parameter

        from relay_ros.bag.recorder import BagRecorder
        from relay_ros.node.policy_node import PolicyNode

        self.plan = plan
        self.context = context
        self.player: Any = None
        self.recorder: Any = None
        self.monitor_node: Any = None
        self.executor: Any = None
        self.thread: threading.Thread | None = None
        params = {**plan.params, "policy_url": server_url}
        self.node = PolicyNode(
            plan.node_name,
            context=context,
            cli_args=["--ros-args", "--params-file", str(plan.params_file)],
            parameter_overrides=[Parameter(k, value=v) for k, v in params.items()],
        )
        try:
            name = self.node.get_name()
            self.preview_topic = f"/{name}/preview"
            self.monitor_node = Node(
                f"{name}_replay_monitor",
                context=context,
                parameter_overrides=[Parameter("use_sim_time", value=True)],
            )
            self.monitor = ReplayMonitor(self.node, plan.inputs.start_ns / 1e9)
            # Sampled on wall time: the node's clock stands still before /clock starts.
            self.monitor_node.create_timer(
                0.02, self.monitor.sample, clock=Clock(clock_type=ClockType.STEADY_TIME)
            )
            self.recorder = BagRecorder(
                self.monitor_node, plan.output, self._record_topics(), storage=plan.storage
            )
            self.executor = SingleThreadedExecutor(context=context)
            self.executor.add_node(self.node)
            self.executor.add_node(self.monitor_node)
            self.thread = threading.Thread(
                target=self.executor.spin, name="relay-replay-executor", daemon=True
            )
            self.thread.start()
        except BaseException:
            self.close()
            raise

    def _record_topics(self) -> dict[str, str]:
        topics = {self.preview_topic: _TRAJECTORY_TYPE}
        for out in self.node.config.outputs:
            topics[self.node.resolve_topic_name(out.topic)] = _TRAJECTORY_TYPE
        topics["/diagnostics"] = _DIAGNOSTICS_TYPE
        return topics

    def wait_connected(self, url_text: str) -> None:
        """Until the node has the server's metadata; ReplayError after the deadline."""
        timeout = self.plan.connect_timeout_s
        if not _wait(lambda: _status_value(self.node, "connected") == "True", timeout):
            detail = self.node.diagnostics_status().message
            raise ReplayError(
                f"policy server {url_text} did not answer within {timeout:g} s: {detail}"
            )
        _wait(lambda: self.monitor_node.count_subscribers(self.preview_topic) >= 1, 5.0)

    def play(self, progress: Callable[[ReplayProgress], None] | None) -> dict[str, int]:
        """Play the configured topics with ``/clock``; messages played per topic."""
        from relay_ros.bag.player import CLOCK_TOPIC, BagPlayer  # rclpy: only when playing
        from relay_ros.node.qos import LATCHED

        plan = self.plan
        self.player = BagPlayer(
            self.context,
            plan.bag,
            rate=plan.rate,
            topics=list(plan.required),
            clock_hz=plan.clock_hz,
            node_name=f"{self.node.get_name()}_bag_player",
            qos_overrides={topic: LATCHED for topic in plan.latched},
        )
        if not self.player.wait_for_subscribers(10.0, [*plan.required, CLOCK_TOPIC]):
            _LOG.warning("not every played topic was matched after 10 s; playing anyway")
        self.player.start()
        while not self.player.wait(timeout=0.5):
            if progress is not None:
                progress(_progress(self.player, self.monitor, plan.inputs))
        if progress is not None:
            progress(_progress(self.player, self.monitor, plan.inputs))
        return dict(self.player.progress.played)

    def finish(self, played: dict[str, int]) -> ReplayOutcome:
        """Let the last replies land, stop spinning, close the output bag, read the node."""
        # Replies and recorder messages still in flight at the bag end.
        time.sleep(0.3)
        self.monitor.sample()
        self._stop_executor()
        node = self.node
        snapshot = node.latency.snapshot()
        status = node.diagnostics_status()
        diagnostics = {kv.key: kv.value for kv in status.values}
        diagnostics["message"] = status.message
        self.recorder.close()
        recorded = self.recorder.counts
        self.recorder = None
        return ReplayOutcome(
            preview_topic=self.preview_topic,
            played=played,
            recorded=recorded,
            hold_periods=self.monitor.finish(),
            refusals=dict(self.monitor.refusals),
            counts=node.counts,
            latency_ms={
                "count": float(snapshot.count),
                **{
                    k: (None if v is None else v * 1000.0)
                    for k, v in (
                        ("mean", snapshot.mean),
                        ("p50", snapshot.p50),
                        ("p95", snapshot.p95),
                        ("p99", snapshot.p99),
                        ("max", snapshot.max),
                    )
                },
            },
            diagnostics=diagnostics,
        )

    def _stop_executor(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(timeout_sec=5.0)
        if self.thread is not None:
            self.thread.join(5.0)
            self.thread = None

    def close(self) -> None:
        if self.recorder is not None:
            with contextlib.suppress(BagError):
                self.recorder.close()
            self.recorder = None
        if self.player is not None:
            self.player.close()
            self.player = None
        self._stop_executor()
        if self.monitor_node is not None:
            self.monitor_node.destroy_node()
            self.monitor_node = None
        self.node.destroy_node()


def _status_value(node: Any, key: str) -> str | None:
    for kv in node.diagnostics_status().values:
        if kv.key == key:
            return kv.value
    return None


def _progress(player: Any, monitor: ReplayMonitor, inputs: BagInput) -> ReplayProgress:
    state = player.progress
    duration = (inputs.end_ns - inputs.start_ns) / 1e9
    bag_time = max(state.bag_time_ns - inputs.start_ns, 0) / 1e9 if state.bag_time_ns else 0.0
    counts = monitor.counts
    return ReplayProgress(
        bag_time_s=bag_time,
        duration_s=duration,
        fraction=min(bag_time / duration, 1.0) if duration > 0 else 1.0,
        played=dict(state.played),
        chunks=counts.get("chunks_published", 0),
        requests=counts.get("requests", 0),
        hold_reason=monitor.hold_reason,
    )
