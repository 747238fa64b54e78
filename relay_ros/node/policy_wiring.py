"""What policy_node builds when it is configured, and tears down when it is cleaned up.

:class:`PolicyWiring` is the configured node: built by the lifecycle transition
*configure* (:mod:`relay_ros.node.policy_node`), closed by *cleanup* and
*shutdown*. Building it reads and validates every parameter (the table of
:mod:`relay_ros.node.params`, the joint limits, the layout against the model's
known dimensions), the camera map, and creates the connection (which connects in
the background), the :class:`~relay_ros.pipeline.streaming.StreamingCore`, the
subscriptions, publishers, timers and the tick. Either all of it is built, or
what was built is closed again and the error propagates: a failed configure leaves
nothing behind.

Wiring ROS to the core:

- cameras and joint states are taken on the tick (:mod:`relay_ros.node.polled`);
  when the tick runs and what it reads is described once, in
  docs/architecture.md, "The tick";
- the observations the core submits go to
  :class:`~relay_ros.wire.connection.PolicyConnection`, whose worker thread talks to
  the server, so no ROS callback ever waits on the network; connection events and
  replies come back through a queue, and the worker wakes the executor with a guard
  condition so the tick drains it at once;
- the core's trajectories become ``JointTrajectory`` messages on each controller's
  topic (or ``~/preview``);
- the switches that stop the robot (:mod:`relay_ros.pipeline.command_switches`):
  the lifecycle state (:meth:`PolicyWiring.activate`, :meth:`PolicyWiring.deactivate`),
  ``~/enable`` (the node's) and the dead-man switch (:mod:`relay_ros.node.deadman`),
  checked on every tick;
- each controller topic nobody subscribes to (a stopped controller, a misspelt
  topic) is named in the log and on ``/diagnostics`` after a second.

Threading: every timer, guard condition and subscription callback of the wiring is
in the node's default MutuallyExclusiveCallbackGroup (with the lifecycle and
parameter services), so the core is only touched by one executor thread at a time.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.clock import JumpThreshold, ROSClock, TimeJump
from rclpy.duration import Duration
from rclpy.exceptions import InvalidHandle
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, String
from websockets.exceptions import InvalidURI

from relay_ros.formats import format_for
from relay_ros.node.deadman import DeadmanSwitch
from relay_ros.node.debug_topics import ObservationTopics
from relay_ros.node.diagnostics_message import diagnostic_status
from relay_ros.node.limit_params import describe_limits, with_robot_text
from relay_ros.node.node_config import NodeConfig
from relay_ros.node.param_spec import ParameterError
from relay_ros.node.polled import (
    ClockRate,
    PolledCallbackGroup,
    PolledSubscription,
    camera_subscription,
)
from relay_ros.node.qos import DEADMAN, JOINT_STATES, LATCHED, RELIABLE
from relay_ros.node.ros_logging import node_logger, route_library_logs
from relay_ros.node.ros_params import LiveParameters, declare_parameters
from relay_ros.node.thread_priority import ProcessPriority
from relay_ros.node.trajectory_publishers import TrajectoryPublishers, unheard_problem
from relay_ros.pipeline.camera_map import CameraEntry, load_model_camera_map
from relay_ros.pipeline.health import Level, assess
from relay_ros.pipeline.server_session import lora_text
from relay_ros.pipeline.streaming import ENABLE_STOP, StreamingCore
from relay_ros.wire.connection import PolicyConnection

if TYPE_CHECKING:
    from relay_ros.node.episode_recording import EpisodeRecording

__all__ = ["INACTIVE_STOP", "LISTENER_GRACE_S", "PolicyWiring"]

#: Why the robot is stopped while the node is configured but not active.
INACTIVE_STOP = "inactive (lifecycle): activate the node to command"
#: How long a controller topic may have no subscriber before the node says so (s):
#: discovery of a running controller takes a few hundred ms.
LISTENER_GRACE_S = 1.0

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
# How often the tick asks the middleware for the controllers' subscriber counts (s).
_LISTENER_CHECK_S = 0.1


def _stamp_s(msg: JointState) -> float:
    """A message's header stamp in seconds (0.0 when the driver leaves it zero)."""
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


class PolicyWiring:
    """The configured policy_node (module docstring).

    Args:
        node: The lifecycle node that owns every entity made here.
        enabled: The operator's ``~/enable`` switch (false: the core starts stopped).
        on_health_change: Called when something the node shows on ``/diagnostics``
            changes between two of its 1 Hz messages (a controller topic unheard or
            heard again), so it is published at once.

    Raises:
        ParameterError, CameraMapError: the configuration is wrong (the message says
            how); nothing is left behind.
        rclpy's InvalidParameterTypeException / InvalidParameterValueException: a
            given value rclpy refuses for a parameter's type or range.
    """

    def __init__(self, node: Node, *, enabled: bool, on_health_change: Callable[[], None]) -> None:
        self._node = node
        self._on_health_change = on_health_change
        # What close() undoes, in reverse order of creation.
        self._undo: list[Callable[[], None]] = []
        try:
            self._build(enabled)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ building
    def _owned(self, entity: Any, destroy: Callable[[Any], Any]) -> Any:
        """``entity``, destroyed with ``destroy(entity)`` when the wiring closes."""
        self._undo.append(lambda: destroy(entity))
        return entity

    def _build(self, enabled: bool) -> None:
        node = self._node
        log = node.get_logger()
        self._config = cfg = declare_parameters(node)
        entries = load_model_camera_map(cfg.camera_map, cfg.model, cfg.layout)
        # Resolved topic names (namespace, remapping): named in every hold reason.
        self._cameras: list[CameraEntry] = [
            dataclasses.replace(e, topic=node.resolve_topic_name(e.topic)) for e in entries
        ]
        self._joint_topic = node.resolve_topic_name(cfg.joint_states_topic)
        self._deadman = (
            DeadmanSwitch(node.resolve_topic_name(cfg.deadman_topic), cfg.deadman_timeout_s)
            if cfg.deadman_topic
            else None
        )
        # thread_priority > 0: the first tick puts the process under SCHED_FIFO.
        self._priority = ProcessPriority(cfg.thread_priority, log)
        self._events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        # Read by hand (cameras, joint states) or not watched by the executor (the
        # publishers' QoS events; the subscriber side reports them): see node.polled.
        self._polled = polled = PolledCallbackGroup()
        group = node.default_callback_group
        # record_dir set: episodes recorded as a LeRobot dataset (node.episode_recording);
        # its directory is opened (repaired) first: one that cannot be used fails configure.
        self._recording: EpisodeRecording | None = None
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
                node,
                cfg,
                self._cameras,
                core=lambda: self.core,
                read_inputs=self._read_joint_states,
                group=group,
                polled_group=polled,
                deserialize=lambda buffer: deserialize_message(buffer, Image),
            )
            self._undo.append(self._recording.close)
        self._trajectories = TrajectoryPublishers(
            node,
            {output.name: output.topic for output in cfg.outputs},
            group=polled,
            create_now=not cfg.dry_run,
        )
        self._undo.append(self._trajectories.destroy)
        # When the controller publishers began to look for subscribers (monotonic s).
        self._listening_since = time.monotonic()
        self._next_listener_check = self._listening_since + LISTENER_GRACE_S
        self._unheard: list[tuple[str, str]] = []
        # When the last observation sent was taken (node clock), for /diagnostics.
        self._last_t_obs: float | None = None
        # The connection worker triggers this after each event (it may do so while
        # the wiring is still being built: the tick runs once the executor spins).
        self._ticks = 0
        self._wake = self._owned(
            node.create_guard_condition(self._tick, callback_group=group),
            node.destroy_guard_condition,
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
                logger=node_logger(log, f"relay_ros.node.{node.get_name()}"),
            )
        except KeyError:
            raise ParameterError(
                "no server to connect to: set the 'policy_url' parameter or WALLE_URL "
                "(environment or .env), e.g. ws://127.0.0.1:8000/{model}"
            ) from None
        except InvalidURI as exc:  # its text shows the URL redacted
            source = "parameter 'policy_url'" if cfg.policy_url else "WALLE_URL"
            raise ParameterError(f"{source}: {exc}") from None
        self._undo.append(self._connection.close)
        # ~/observation/* show each observation sent, while someone subscribes.
        observation_topics = ObservationTopics(
            node,
            [c.key for c in self._cameras],
            cfg.state_joints,
            wire_format=format_for(cfg.model, cfg.layout),
            callback_group=polled,
        )
        self._undo.append(lambda: observation_topics.destroy(node))
        self._observation_topics = observation_topics
        # Cameras and joint states are read on the tick, not pushed per message
        # (node.polled): the node uses only the newest frames, at request time. Their
        # ages (system clock) go on the node clock at its rate (sim time: not 1).
        self._clock_rate = ClockRate()
        camera_subs = {
            entry.key: camera_subscription(
                node,
                entry,
                group=polled,
                callback=functools.partial(self._on_image, entry),
                clock_rate=self._clock_rate,
            )
            for entry in self._cameras
        }
        for sub in camera_subs.values():
            self._owned(sub.subscription, node.destroy_subscription)
        frame_sources: dict[str, Any] = dict(camera_subs)
        if self._recording is not None:  # the recorder reads the same camera subscriptions
            frame_sources = self._recording.share_frames(frame_sources)
        stopped = {"lifecycle": INACTIVE_STOP}
        if not enabled:
            stopped["enable"] = ENABLE_STOP
        # The dead-man switch's verdict the core has now (None: pressed, or no switch).
        self._deadman_stop = None if self._deadman is None else self._deadman.stop_reason(0.0)
        if self._deadman_stop is not None:
            stopped["deadman"] = self._deadman_stop
        self.core = StreamingCore(
            cfg,
            camera_keys=[c.key for c in self._cameras],
            submit=self._submit,
            publish=self._trajectories.publish,
            request_reset=self._connection.request_reset,
            log=log,
            cameras=self._cameras,
            # An Image encoding the CDR reader does not parse: rclpy's deserializer.
            deserialize=lambda buffer: deserialize_message(buffer, Image),
            # The core reads each camera's newest frame itself, shortly before a request.
            frame_sources=frame_sources,
            stopped=stopped,
            joint_states_topic=self._joint_topic,
        )
        self._joint_sub = PolledSubscription(
            node,
            JointState,
            self._joint_topic,
            JOINT_STATES,
            group=polled,
            callback=self._on_joint_state,
        )
        self._owned(self._joint_sub.subscription, node.destroy_subscription)
        # Parameter services run in the default group: sharing it keeps a live
        # parameter change from running beside a tick, whatever executor spins the node.
        self._owned(
            node.create_subscription(
                String, "~/prompt", self._on_prompt, RELIABLE, callback_group=group
            ),
            node.destroy_subscription,
        )
        if self._deadman is not None:
            self._owned(
                node.create_subscription(
                    Bool, self._deadman.topic, self._on_deadman, DEADMAN, callback_group=group
                ),
                node.destroy_subscription,
            )
        # The robot's URDF, as robot_state_publisher publishes it, unless a parameter gave it.
        self._robot_text: str | None = None
        self._robot_topic = ""
        if cfg.robot is None and cfg.robot_description_topic:
            robot_sub = node.create_subscription(
                String,
                cfg.robot_description_topic,
                self._on_robot_description,
                LATCHED,
                callback_group=group,
            )
            self._robot_topic = robot_sub.topic_name
            self._owned(robot_sub, node.destroy_subscription)
        # The tick runs when the core next has work (a publication, a request) and
        # at once after a connection event (self._wake); at least every _IDLE_TICK_S.
        self._tick_timer = self._owned(
            node.create_timer(_IDLE_TICK_S, self._tick, callback_group=group),
            node.destroy_timer,
        )
        self._live = LiveParameters(node, cfg, self._apply_config)
        self._undo.append(self._live.close)
        # use_sim_time: /clock going back, or forward by a second or more at once, restarts
        # the core's timeline (pipeline.clock_jump); handled on the tick like any event.
        jump_handle = node.get_clock().create_jump_callback(
            JumpThreshold(
                min_forward=Duration(seconds=_JUMP_FORWARD_S),
                min_backward=Duration(seconds=-_JUMP_BACKWARD_S),
                on_clock_change=True,
            ),
            post_callback=self._on_clock_jump,
        )
        self._undo.append(jump_handle.unregister)
        # The core's own records (e.g. "camera ... sends mono8 frames") in this node's log.
        self._undo.append(route_library_logs(log))
        log.info(self._describe())
        if cfg.limits_problem is None and cfg.joint_limits:
            log.info(f"joint limits: {describe_limits(cfg.joint_limits)}")

    def _describe(self) -> str:
        """The start-up line: what runs, and every resolved topic it reads and writes."""
        cfg = self._config
        node = self._node
        cameras = ", ".join(f"'{c.key}' on {c.topic} ({c.transport})" for c in self._cameras)
        outputs = ", ".join(
            f"'{o.name}' on {node.resolve_topic_name(o.topic)}" for o in cfg.outputs
        )
        where = "dry run: trajectories only on ~/preview" if cfg.dry_run else "commanding"
        deadman = (
            ""
            if self._deadman is None
            else f"; dead-man switch {self._deadman.topic} ({cfg.deadman_timeout_s:.2f} s)"
        )
        return (
            f"policy_node for {cfg.model}"
            f"{f' in layout {cfg.layout!r}' if cfg.layout else ''} "
            f"({lora_text(cfg.lora, cfg.lora_scale)}) configured ({where}): "
            f"cameras {cameras}; joint states on {self._joint_topic}; "
            f"controllers {outputs}{deadman}"
        )

    # ------------------------------------------------------------------ lifecycle
    def activate(self) -> None:
        """The node became active: command (unless another switch stops it), and record
        (the next episode starts with the next frame)."""
        if self._recording is not None:
            self._recording.set_active(True)
        self.core.set_switch("lifecycle", None, self._now())
        self._wake_up()

    def deactivate(self, *, because: str = "deactivate") -> None:
        """The node leaves *active* (``because``: ``"deactivate"`` or ``"shutdown"``, the
        recorded episode's end reason): hold (through the core's checked hold), then
        send nothing until activated again; the episode being recorded ends, and no
        frame is recorded until then."""
        if self._recording is not None:
            self._recording.end_episode(because)
            self._recording.set_active(False)
        self.core.set_switch("lifecycle", INACTIVE_STOP, self._now())
        self._wake_up()

    def set_enabled(self, enabled: bool) -> str:
        """``~/enable``: the operator's switch; returns what happened (disabling ends
        the episode being recorded)."""
        if not enabled:
            self._end_recorded_episode("disabled")
        message = self.core.set_enabled(enabled, self._now())
        self._wake_up()
        return message

    def reset_episode(self) -> str:
        """``~/reset``: a new episode (recorded ones too); returns the sentence for the reply."""
        if self._recording is not None:
            self._recording.end_episode("reset")
        message = self.core.reset_episode(self._now())
        self._wake_up()
        return message

    def _end_recorded_episode(self, reason: str) -> None:
        """The policy stops commanding for ``reason``: the recorded episode ends (what
        follows, a human in control, starts the next one)."""
        if self._recording is not None and self.core.enabled:
            self._recording.end_episode(reason)

    @property
    def recording(self) -> EpisodeRecording | None:
        """The :class:`~relay_ros.node.episode_recording.EpisodeRecording`, None when
        ``record_dir`` is empty."""
        return self._recording

    def close(self) -> None:
        """Stop the connection worker (joins its thread, closes its socket) and remove
        every subscription, publisher, timer and callback the wiring made. Idempotent."""
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except (InvalidHandle, RuntimeError):
                # The node or its context is going away already: nothing left to undo.
                pass

    # ------------------------------------------------------------------ parameters
    @property
    def config(self) -> NodeConfig:
        """The validated parameters this configuration runs with."""
        return self._config

    @property
    def connection(self) -> PolicyConnection:
        """The connection to the policy server (its counters, for benchmarks)."""
        return self._connection

    def _apply_config(self, config: NodeConfig) -> None:
        """A live parameter change (validated by LiveParameters), in force when this returns."""
        self.core.apply_config(config, self._now())
        if self._config.dry_run and not config.dry_run:
            # The controllers are commanded from now on: look for their subscribers.
            self._trajectories.create_all()
            self._listening_since = time.monotonic()
            self._next_listener_check = self._listening_since + LISTENER_GRACE_S
        self._config = config
        self._wake_up()

    def _on_robot_description(self, msg: String) -> None:
        """A URDF on robot_description: the limits resolved over it, in force at once."""
        if msg.data == self._robot_text:
            return
        self._robot_text = msg.data
        config, sentence = with_robot_text(self._live.config, msg.data, self._robot_topic)
        self._live.config = config
        self._apply_config(config)
        if config.limits_problem:  # rclpy wants one severity per call site
            self._node.get_logger().error(sentence)
        else:
            self._node.get_logger().info(sentence)

    def _on_clock_jump(self, jump: TimeJump) -> None:
        """From rclpy's time source: the node clock jumped; the tick restarts the core.
        The first /clock message (from time 0, nothing scheduled yet) is no jump."""
        delta = jump.delta.nanoseconds * 1e-9
        if self._now() - delta > 0.0:
            self._event("clock_jump", delta)
            if self._recording is not None:  # its frames' times are on the old timeline
                self._recording.clock_jumped()

    def _on_prompt(self, msg: String) -> None:
        # Through the parameter, so `ros2 param get prompt` shows the prompt in use.
        result = self._node.set_parameters([Parameter("prompt", value=msg.data)])[0]
        if not result.successful:
            self._node.get_logger().warning(f"~/prompt refused: {result.reason}")

    # ------------------------------------------------------------------ callbacks
    def _now(self) -> float:
        return self._node.get_clock().now().nanoseconds * 1e-9

    def _on_image(self, entry: CameraEntry, msg: Any) -> None:
        # Only when an executor pushes a message despite PolledCallbackGroup.
        self.core.frame_arrived(entry.key, msg, self._now())

    def _on_joint_state(self, msg: JointState) -> None:
        self.core.joint_state(msg.name, msg.position, self._now(), _stamp_s(msg))

    def _on_deadman(self, msg: Bool) -> None:
        assert self._deadman is not None
        now = self._now()
        self._deadman.received(bool(msg.data), now)
        self._check_deadman(now)
        self._wake_up()

    def _check_deadman(self, now: float) -> None:
        """The dead-man switch's verdict at ``now`` handed to the core (a change of
        reason holds once; the same reason again does nothing)."""
        if self._deadman is None:
            return
        stop = self._deadman.stop_reason(now)
        if stop != self._deadman_stop:
            self._deadman_stop = stop
            if stop is None:
                self._node.get_logger().info(f"dead-man switch pressed on {self._deadman.topic}")
            self.core.set_switch("deadman", stop, now)

    def _read_joint_states(self, now: float) -> None:
        """Hand the joint states queued since the last tick to the core, each with
        its reception time."""
        for taken in self._joint_sub.take_all():
            msg = taken.msg
            received = self._clock_rate.received(now, taken.age_s)
            self.core.joint_state(msg.name, msg.position, received, _stamp_s(msg))
            if self._recording is not None:
                self._recording.joint_state(msg.name, msg.position, received)

    def _submit(self, observation: dict[str, Any], tag: Any) -> bool:
        if not self._connection.submit(observation, tag, handoff_s=_HANDOFF_S):
            return False
        self._last_t_obs = tag.t_obs
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
        except (InvalidHandle, RuntimeError, AttributeError):
            # Closing, or still being built: no tick is needed (one runs once it spins).
            pass

    @property
    def ticks(self) -> int:
        """How many times the scheduling tick ran (timer and wake-ups)."""
        return self._ticks

    def _tick(self) -> None:
        self._priority.apply()  # the first tick only
        self._ticks += 1
        now = self._now()
        clock = self._node.get_clock()  # a node's is a ROSClock
        self._clock_rate.observe(
            now, simulated=isinstance(clock, ROSClock) and clock.ros_time_is_active
        )
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
                self._clock_rate.reset()
                self.core.clock_jumped(payload, now)
            else:
                self.core.result(payload, now)
        self._check_deadman(now)
        self._read_joint_states(now)
        self.core.tick(now)
        self._check_listeners()
        self._schedule_tick(now)

    def _schedule_tick(self, now: float) -> None:
        """Time the next tick for when the core has work, at most ``_IDLE_TICK_S`` away
        (and when a pressed dead-man switch would expire)."""
        deadline = self.core.next_deadline(now)
        wait = _IDLE_TICK_S if deadline is None else min(_IDLE_TICK_S, deadline - now)
        expires = None if self._deadman is None else self._deadman.expires_at()
        if expires is not None and expires >= now:
            # Just after the expiry: stop_reason says "stale" only past it.
            wait = min(wait, expires - now + _MIN_TICK_S)
        period_ns = int(max(_MIN_TICK_S, wait) * 1e9)
        timer = self._tick_timer
        if timer.timer_period_ns != period_ns:
            timer.timer_period_ns = period_ns
        timer.reset()  # the next call is one (new) period from now

    # ------------------------------------------------------------------ controllers
    def _check_listeners(self) -> None:
        """Every ``_LISTENER_CHECK_S`` after the grace: which controller topics nobody
        subscribes to (not in dry run); a change is logged and published at once."""
        moment = time.monotonic()
        if moment < self._next_listener_check:
            return
        self._next_listener_check = moment + _LISTENER_CHECK_S
        if self._config.dry_run:
            # Nothing goes to the controllers: whether they listen is no problem now.
            if self._unheard:
                self._unheard = []
                self._on_health_change()
            return
        unheard = self._trajectories.unheard()
        if unheard == self._unheard:
            return
        log = self._node.get_logger()
        for name, topic in unheard:
            if (name, topic) not in self._unheard:
                log.warning(
                    f"controller '{name}': nobody subscribes to {topic} after "
                    f"{moment - self._listening_since:.1f} s; is the controller running, "
                    "and is its topic spelt so? Trajectories sent there move nothing."
                )
        for name, topic in self._unheard:
            if (name, topic) not in unheard:
                log.info(f"controller '{name}': {topic} has a subscriber now")
        self._unheard = unheard
        self._on_health_change()

    @property
    def unheard_controllers(self) -> list[tuple[str, str]]:
        """(output name, resolved topic) of each controller topic nobody subscribes to
        (as of the last check; empty in dry run and during the first second)."""
        return list(self._unheard)

    # ------------------------------------------------------------------ diagnostics
    def diagnostics_status(self, name: str, extra: dict[str, str]) -> DiagnosticStatus:
        """The configured node's health as one DiagnosticStatus named ``name``, with
        the node's ``extra`` values."""
        now = self._now()
        health = assess(
            self.core,
            now,
            connected=self._connection.connected,
            connection_error=self._connection.last_error,
        )
        problem = unheard_problem(self._unheard)
        if problem is not None:
            # A controller that hears nothing explains the holds and refusals after it.
            message = problem if health.level == Level.OK else f"{problem}; {health.message}"
            health = dataclasses.replace(
                health, level=max(health.level, Level.WARN), message=message
            )
        age = "" if self._last_t_obs is None else f"{now - self._last_t_obs:.3f}"
        values = {
            "server": self._connection.display_url,
            "observation_age_s": age,
            "thread priority": self._priority.status,
            "controllers_unheard": ", ".join(topic for _, topic in self._unheard),
            "deadman": "" if self._deadman is None else self._deadman.topic,
            "model": self._config.model,
            **extra,
        }
        # hardware_id: the fully qualified node name (the robot this node drives).
        hardware_id = self._node.get_fully_qualified_name()
        return diagnostic_status(health, name=name, hardware_id=hardware_id, extra=values)
