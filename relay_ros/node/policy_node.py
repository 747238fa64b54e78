"""policy_node: cameras and joint states in, action chunks out to ros2_control.

This node only wires ROS to :class:`~relay_ros.pipeline.streaming.StreamingCore`,
which decides everything (when to request, what is safe to publish, when to hold):

- cameras and joint states are taken by the node on its tick
  (:mod:`relay_ros.node.polled`); when the tick runs and what it reads is described
  once, in docs/architecture.md, "The tick";
- the observations it submits go to
  :class:`~relay_ros.wire.connection.PolicyConnection`, whose worker thread talks to
  the server, so no ROS callback ever waits on the network; connection events and
  replies come back through a queue, and the worker wakes the executor with a guard
  condition so the tick drains it at once;
- the core's trajectories become ``JointTrajectory`` messages on each controller's
  topic (or ``~/preview``), its health ``/diagnostics`` at 1 Hz.

Threading: every timer, guard condition, service and prompt callback of this node is
in one MutuallyExclusiveCallbackGroup, so the core is only touched by one executor
thread at a time, whatever executor spins it (the polled subscriptions run no
callbacks). The only other thread is the
connection worker, which talks to the node through a thread-safe queue; every
callback is short (the longest converts the frames of one observation, a few ms),
so ``main()`` spins a SingleThreadedExecutor: rclpy 7.1's MultiThreadedExecutor can
skip timer periods for 0.3-1 s at a time with this node and a 30 Hz publisher in one
process, which would stall the robot.
With ``thread_priority`` > 0 the first tick puts every thread of the process under
``SCHED_FIFO`` (:mod:`relay_ros.node.thread_priority`).
"""

from __future__ import annotations

import gc
import queue
import sys
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.clock import JumpThreshold, TimeJump
from rclpy.duration import Duration
from rclpy.exceptions import InvalidHandle
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from std_srvs.srv import SetBool, Trigger

from relay_ros.node.debug_topics import ObservationTopics
from relay_ros.node.diagnostics_message import diagnostic_array, diagnostic_status
from relay_ros.node.limit_params import describe_limits, with_robot_text
from relay_ros.node.node_config import NodeConfig
from relay_ros.node.node_main import NodeProgram, run_node
from relay_ros.node.param_spec import ParameterError
from relay_ros.node.params import expected_value
from relay_ros.node.policy_usage import usage
from relay_ros.node.polled import PolledCallbackGroup, PolledSubscription, camera_subscription
from relay_ros.node.qos import JOINT_STATES, LATCHED, RELIABLE
from relay_ros.node.ros_logging import node_logger, route_library_logs
from relay_ros.node.ros_params import LiveParameters, declare_parameters
from relay_ros.node.thread_priority import ProcessPriority
from relay_ros.node.trajectory_publishers import TrajectoryPublishers
from relay_ros.pipeline.camera_map import CameraEntry, CameraMapError, load_model_camera_map
from relay_ros.pipeline.health import assess
from relay_ros.pipeline.stats import LatencyStats
from relay_ros.pipeline.streaming import StreamingCore
from relay_ros.stop_signals import take_stop_signals
from relay_ros.wire.connection import PolicyConnection

__all__ = ["PolicyNode", "main"]

# Longest time between two ticks: joint states are read at least this often,
# whatever the core plans.
_IDLE_TICK_S = 0.1
# A /clock step at least this large counts as a jump (a sim running ahead at 100 Hz
# moves 10 ms per message; backwards, any step over a millisecond is one).
_JUMP_FORWARD_S = 1.0
_JUMP_BACKWARD_S = 0.001
# Shortest timer period (rcl timers take a period > 0).
_MIN_TICK_S = 0.001
# After submitting an observation the executor thread waits up to this long for the
# connection worker to write it to the socket, instead of running on with the GIL
# the worker needs to encode and send it (about 1 ms on a fast link; docs/node.md).
_HANDOFF_S = 0.005


def _stamp_s(msg: JointState) -> float:
    """A message's header stamp in seconds (0.0 when the driver leaves it zero)."""
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


class PolicyNode(Node):
    """ROS adapter around :class:`~relay_ros.pipeline.streaming.StreamingCore`."""

    def __init__(self, node_name: str = "policy_node", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        try:
            self._setup()
        except BaseException:
            # A configuration error must not leave a half-built node in the graph.
            super().destroy_node()
            raise

    def _setup(self) -> None:
        self._config = cfg = declare_parameters(self)
        self._cameras: list[CameraEntry] = load_model_camera_map(cfg.camera_map, cfg.model)
        # thread_priority > 0: the first tick puts the process under SCHED_FIFO.
        self._priority = ProcessPriority(cfg.thread_priority, self.get_logger())
        self._events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        # Read by hand (cameras, joint states) or not watched by the executor (the
        # publishers' QoS events; the subscriber side reports them): see node.polled.
        self._polled = polled = PolledCallbackGroup()
        # record_dir set: episodes recorded as a LeRobot dataset (node.episode_recording);
        # its directory is opened (repaired) first: one that cannot be used stops the start.
        self._recording: Any = None
        if cfg.record_dir is not None:
            # Imported only when recording: PyAV and pyarrow take ~0.3 s to import, and
            # a ROS install gets them from pip, not rosdep (docs/ros_install.md).
            try:
                from relay_ros.node.episode_recording import EpisodeRecording
            except ImportError as exc:
                raise ParameterError(
                    f"parameter 'record_dir' is set, but recording needs PyAV and pyarrow "
                    f'({exc}); install them: python3 -m pip install "av>=14" "pyarrow>=15"'
                ) from None

            self._recording = EpisodeRecording(
                self,
                cfg,
                self._cameras,
                core=lambda: self.core,
                read_inputs=self._read_joint_states,
                group=self.default_callback_group,
                polled_group=polled,
                deserialize=lambda buffer: deserialize_message(buffer, Image),
            )
        self._trajectories = TrajectoryPublishers(
            self,
            {output.name: output.topic for output in cfg.outputs},
            group=polled,
            create_now=not cfg.dry_run,
        )
        self._diagnostics = self.create_publisher(
            DiagnosticArray, "/diagnostics", RELIABLE, callback_group=polled
        )
        # The connection worker triggers this after each event (it may do so while
        # the node is still being built: the tick runs once the executor spins).
        self._ticks = 0
        self._wake = self.create_guard_condition(
            self._tick, callback_group=self.default_callback_group
        )
        try:
            self._connection = PolicyConnection(
                cfg.model,
                url=cfg.policy_url,
                reconnect_initial_s=0.25,
                reconnect_max_s=cfg.reconnect_max_backoff_s,
                on_result=lambda outcome: self._event("result", outcome),
                on_connect=lambda metadata: self._event("connect", metadata),
                on_disconnect=lambda reason: self._event("disconnect", reason),
                # Asked before each request (only the core makes requests, so it exists).
                request_timeout_s=lambda: self.core.request_timeout(),
                logger=node_logger(self.get_logger(), f"relay_ros.node.{self.get_name()}"),
            )
        except KeyError:
            raise ParameterError(
                "no server to connect to: set the 'policy_url' parameter or WALLE_URL "
                "(environment or .env), e.g. ws://127.0.0.1:8000/{model}"
            ) from None
        # ~/observation/* show each observation sent, while someone subscribes.
        self._observation_topics = ObservationTopics(
            self, [c.key for c in self._cameras], cfg.state_joints, callback_group=polled
        )
        # Cameras and joint states are read on the tick, not pushed per message
        # (node.polled): the node uses only the newest frames, at request time.
        self._camera_subs = [
            (
                entry,
                camera_subscription(
                    self,
                    entry,
                    group=polled,
                    callback=lambda msg, entry=entry: self._on_image(entry, msg),
                ),
            )
            for entry in self._cameras
        ]
        frame_sources: dict[str, Any] = {entry.key: sub for entry, sub in self._camera_subs}
        if self._recording is not None:  # the recorder reads the same camera subscriptions
            frame_sources = self._recording.share_frames(frame_sources)
        self.core = StreamingCore(
            cfg,
            camera_keys=[c.key for c in self._cameras],
            submit=self._submit,
            publish=self._trajectories.publish,
            request_reset=self._connection.request_reset,
            log=self.get_logger(),
            cameras=self._cameras,
            # An Image encoding the CDR reader does not parse: rclpy's deserializer.
            deserialize=lambda buffer: deserialize_message(buffer, Image),
            # The core reads each camera's newest frame itself, shortly before a request.
            frame_sources=frame_sources,
        )

        # Parameter services run in the default group: sharing it keeps a live
        # parameter change from running beside a tick, whatever executor spins the node.
        group = self.default_callback_group
        self._joint_sub = PolledSubscription(
            self,
            JointState,
            cfg.joint_states_topic,
            JOINT_STATES,
            group=polled,
            callback=self._on_joint_state,
        )
        self.create_subscription(
            String,
            "~/prompt",
            self._on_prompt,
            RELIABLE,
            callback_group=group,
        )
        # The robot's URDF, as robot_state_publisher publishes it, unless a parameter gave it.
        self._robot_text: str | None = None
        if cfg.robot is None and cfg.robot_description_topic:
            self._robot_sub = self.create_subscription(
                String,
                cfg.robot_description_topic,
                self._on_robot_description,
                LATCHED,
                callback_group=group,
            )
        self.create_service(Trigger, "~/reset", self._on_reset, callback_group=group)
        self.create_service(SetBool, "~/enable", self._on_enable, callback_group=group)
        # The tick runs when the core next has work (a publication, a request) and
        # at once after a connection event (self._wake); at least every _IDLE_TICK_S.
        self._tick_timer = self.create_timer(_IDLE_TICK_S, self._tick, callback_group=group)
        self._diag_timer = self.create_timer(1.0, self._publish_diagnostics, callback_group=group)
        self._live = LiveParameters(self, cfg, self._apply_config)
        # use_sim_time: /clock going back, or forward by a second or more at once, restarts
        # the core's timeline (pipeline.clock_jump); handled on the tick like any event.
        self._jump_handle = self.get_clock().create_jump_callback(
            JumpThreshold(
                min_forward=Duration(seconds=_JUMP_FORWARD_S),
                min_backward=Duration(seconds=-_JUMP_BACKWARD_S),
                on_clock_change=True,
            ),
            post_callback=self._on_clock_jump,
        )
        # The core's own records (e.g. "camera ... sends mono8 frames") in this node's log.
        self._unroute_logs = route_library_logs(self.get_logger())
        self.get_logger().info(
            f"policy_node for {cfg.model}: {len(self._cameras)} camera(s), outputs "
            f"{[o.name for o in cfg.outputs]}, {'dry run' if cfg.dry_run else 'commanding'}, "
            f"{'enabled' if cfg.autostart else 'disabled until ~/enable'}"
        )
        if cfg.limits_problem is None and cfg.joint_limits:
            self.get_logger().info(f"joint limits: {describe_limits(cfg.joint_limits)}")

    # ------------------------------------------------------------------ parameters
    def _apply_config(self, config: NodeConfig) -> None:
        """A live parameter change (validated by LiveParameters), in force when this returns."""
        self.core.apply_config(config, self._now())
        self._config = config
        self._wake_up()

    def _on_robot_description(self, msg: String) -> None:
        """A URDF on robot_description: the limits resolved over it, in force at once."""
        if msg.data == self._robot_text:
            return
        self._robot_text = msg.data
        config, sentence = with_robot_text(self._live.config, msg.data, self._robot_sub.topic_name)
        self._live.config = config
        self._apply_config(config)
        if config.limits_problem:  # rclpy wants one severity per call site
            self.get_logger().error(sentence)
        else:
            self.get_logger().info(sentence)

    def _on_clock_jump(self, jump: TimeJump) -> None:
        """From rclpy's time source: the node clock jumped; the tick restarts the core.
        The first /clock message (from time 0, nothing scheduled yet) is no jump."""
        delta = jump.delta.nanoseconds * 1e-9
        if self._now() - delta > 0.0:
            self._event("clock_jump", delta)

    def _on_prompt(self, msg: String) -> None:
        # Through the parameter, so `ros2 param get prompt` shows the prompt in use.
        result = self.set_parameters([Parameter("prompt", value=msg.data)])[0]
        if not result.successful:
            self.get_logger().warning(f"~/prompt refused: {result.reason}")

    @property
    def config(self) -> NodeConfig:
        """The validated parameters this node runs with."""
        return self._config

    @property
    def session_id(self) -> str:
        """The session id sent with observations; ``~/reset`` starts a new one."""
        return self.core.session_id

    @property
    def counts(self) -> dict[str, int]:
        """Requests, chunks, error replies, refusals and connection errors so far."""
        return self.core.counts

    @property
    def last_refusal(self) -> str | None:
        """Why the last chunk, frame or observation was refused, in a sentence."""
        return self.core.last_refusal

    @property
    def hold_reason(self) -> str | None:
        """Why the node is holding position now, or None while it streams."""
        return self.core.hold_reason

    @property
    def latency(self) -> LatencyStats:
        """Observation -> reply latencies measured on the node clock."""
        return self.core.latency

    @property
    def pipeline_timing(self) -> dict[str, LatencyStats]:
        """Per-frame conversion, decision-to-wire and frame-to-wire seconds."""
        return self.core.pipeline_timing

    # ------------------------------------------------------------------ callbacks
    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_image(self, entry: CameraEntry, msg: Any) -> None:
        # Only when an executor pushes a message despite PolledCallbackGroup.
        self.core.frame_arrived(entry.key, msg, self._now())

    def _on_joint_state(self, msg: JointState) -> None:
        self.core.joint_state(msg.name, msg.position, self._now(), _stamp_s(msg))

    def _read_joint_states(self, now: float) -> None:
        """Hand the joint states queued since the last tick to the core, each with
        its reception time."""
        for taken in self._joint_sub.take_all():
            msg = taken.msg
            received = now - taken.age_s
            self.core.joint_state(msg.name, msg.position, received, _stamp_s(msg))
            if self._recording is not None:
                self._recording.joint_state(msg.name, msg.position, received)

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        if self._recording is not None:
            self._recording.end_episode("reset")
        response.message = self.core.reset_episode(self._now())
        response.success = True
        self._wake_up()
        return response

    def _on_enable(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        if self._recording is not None and not request.data and self.core.enabled:
            self._recording.end_episode("disabled")
        response.message = self.core.set_enabled(request.data, self._now())
        response.success = True
        self._wake_up()
        return response

    def _submit(self, observation: dict[str, Any], tag: Any) -> bool:
        if not self._connection.submit(observation, tag, handoff_s=_HANDOFF_S):
            return False
        self._observation_topics.publish(observation, tag.t_obs)
        return True

    def _event(self, kind: str, payload: Any) -> None:
        """From the connection worker: queue the event and wake the executor."""
        self._events.put((kind, payload))
        self._wake_up()

    def _wake_up(self) -> None:
        """Run a tick as soon as the executor can (the core's plan changed)."""
        try:
            self._wake.trigger()
        except (InvalidHandle, RuntimeError):
            # The node or the context is shutting down: no tick is needed any more.
            pass

    @property
    def ticks(self) -> int:
        """How many times the scheduling tick ran (timer and wake-ups)."""
        return self._ticks

    def _tick(self) -> None:
        self._priority.apply()  # the first tick only
        self._ticks += 1
        now = self._now()
        while True:
            try:
                kind, payload = self._events.get_nowait()
            except queue.Empty:
                break
            if kind == "connect":
                self.core.connected(payload, now)
            elif kind == "disconnect":
                self.core.disconnected(payload, now)
            elif kind == "clock_jump":
                self.core.clock_jumped(payload, now)
            else:
                self.core.result(payload, now)
        self._read_joint_states(now)
        self.core.tick(now)
        self._schedule_tick(now)

    def _schedule_tick(self, now: float) -> None:
        """Time the next tick for when the core has work, at most ``_IDLE_TICK_S`` away."""
        deadline = self.core.next_deadline(now)
        wait = _IDLE_TICK_S if deadline is None else min(_IDLE_TICK_S, deadline - now)
        period_ns = int(max(_MIN_TICK_S, wait) * 1e9)
        timer = self._tick_timer
        if timer.timer_period_ns != period_ns:
            timer.timer_period_ns = period_ns
        timer.reset()  # the next call is one (new) period from now

    # ------------------------------------------------------------------ diagnostics
    def diagnostics_status(self) -> DiagnosticStatus:
        """The node's health as one DiagnosticStatus (also published at 1 Hz)."""
        health = assess(
            self.core,
            self._now(),
            connected=self._connection.connected,
            connection_error=self._connection.last_error,
        )
        return diagnostic_status(
            health,
            name=f"{self.get_name()}: policy",
            hardware_id=self._config.model,
            extra={"thread priority": self._priority.status},
        )

    def _publish_diagnostics(self) -> None:
        stamp = self.get_clock().now().to_msg()
        self._diagnostics.publish(diagnostic_array(self.diagnostics_status(), stamp))

    # ------------------------------------------------------------------ lifetime
    @property
    def recording(self) -> Any:
        """The :class:`~relay_ros.node.episode_recording.EpisodeRecording`, None when
        ``record_dir`` is empty."""
        return self._recording

    def destroy_node(self) -> None:
        """Stop the connection worker (joins its thread, closes its socket), end and
        write the episode being recorded, and destroy the node."""
        if self._recording is not None:
            self._recording.close()
        self._unroute_logs()
        self._jump_handle.unregister()
        self._connection.close()
        super().destroy_node()


def freeze_startup_heap() -> None:
    """Move every object alive now out of the garbage collector's reach.

    Python's cyclic collector now and then scans every tracked object (its oldest
    generation); after the imports and the node's construction that is tens of
    thousands (rclpy, NumPy, OpenCV, message types), and the scan stops the executor
    thread for about 20 ms, a late chunk or request when it falls on one.
    Objects
    that live as long as the process need no scanning: ``gc.freeze()`` after startup
    (as CPython's documentation suggests for long-running processes) leaves the
    collector only what the loop allocates. Call it once, right before spinning.
    """
    gc.collect()
    gc.freeze()


def _start() -> PolicyNode:
    node = PolicyNode()
    freeze_startup_heap()
    return node


def main(args: list[str] | None = None) -> int:
    """Console entry point ``policy_node``; returns the exit code (:func:`run_node`)."""
    return run_node(
        NodeProgram(
            "policy_node",
            _start,
            usage,
            config_errors=(ParameterError, CameraMapError),
            parameter_type=expected_value,
        ),
        args,
    )


if __name__ == "__main__":
    take_stop_signals()
    sys.exit(main())
