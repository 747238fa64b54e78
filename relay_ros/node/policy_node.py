"""policy_node: cameras and joint states in, action chunks out to ros2_control.

This node only wires ROS to the plain modules that hold the logic:

- inputs: camera topics (:mod:`relay_ros.pipeline.camera_map`, :mod:`relay_ros.pipeline.images`) and
  joint states (:mod:`relay_ros.pipeline.state`) are cached with their arrival time;
- a timer drives the :class:`~relay_ros.pipeline.scheduler.ChunkScheduler`; when it wants a
  chunk, the observation (:mod:`relay_ros.pipeline.observation`) is handed to
  :class:`~relay_ros.wire.connection.PolicyConnection`, whose worker thread talks to
  the server, so no ROS callback ever waits on the network;
- replies come back through a queue, pass :mod:`relay_ros.pipeline.safety`, are held by
  the scheduler until their switch time and are published per controller
  (:mod:`relay_ros.pipeline.trajectory`, :mod:`relay_ros.node.outputs`).

Threading: every subscription, timer and service callback of this node is in one
MutuallyExclusiveCallbackGroup, so node state is only touched by one executor
thread at a time, whatever executor spins it. The only other thread is the
connection worker, which talks to the node through a thread-safe queue; every
callback is short (the longest is a JPEG decode, a few ms), so ``main()`` spins a
SingleThreadedExecutor. rclpy 7.1's MultiThreadedExecutor was measured here to
skip timer periods for 0.3-1 s at a time with this node and a 30 Hz publisher in
one process, which would stall the robot; the single-threaded one never did.
"""

from __future__ import annotations

import math
import queue
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import rclpy
from builtin_interfaces.msg import Duration as DurationMsg
from builtin_interfaces.msg import Time as TimeMsg
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.exceptions import ParameterUninitializedException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import (
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from relay_ros.node.outputs import OutputController, OutputsError, load_outputs
from relay_ros.node.params import (
    PARAMETERS,
    NodeConfig,
    ParameterError,
    ParamSpec,
    build_config,
    limit_parameter_specs,
    output_parameter_specs,
)
from relay_ros.pipeline.camera_map import (
    CameraEntry,
    CameraMapError,
    camera_constraints,
    load_camera_map,
)
from relay_ros.pipeline.image_cdr import CdrImageError, parse_image_cdr
from relay_ros.pipeline.images import compressed_to_rgb, image_to_rgb, resize_with_pad
from relay_ros.pipeline.observation import ObservationBuilder, reply_to_chunk
from relay_ros.pipeline.safety import (
    JointLimits,
    SafetyError,
    check_chunk,
    check_first_step,
    check_fresh,
)
from relay_ros.pipeline.scheduler import ChunkScheduler, Publication, SchedulerConfig
from relay_ros.pipeline.state import JointStateCache, MissingJointsError, StaleInputError
from relay_ros.pipeline.stats import LatencyStats
from relay_ros.pipeline.trajectory import build_points, format_t_obs, seconds_to_sec_nanosec
from relay_ros.wire.connection import InferOutcome, PolicyConnection

__all__ = ["PolicyNode", "main"]

_PARAM_TYPES = {
    "string": Parameter.Type.STRING,
    "int": Parameter.Type.INTEGER,
    "double": Parameter.Type.DOUBLE,
    "bool": Parameter.Type.BOOL,
    "string_array": Parameter.Type.STRING_ARRAY,
    "int_array": Parameter.Type.INTEGER_ARRAY,
    "double_array": Parameter.Type.DOUBLE_ARRAY,
}

_HOLD_TIME_S = 0.1  # time_from_start of the single point of a hold trajectory

_RELIABLE = QoSProfile(
    depth=10, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE
)


@dataclass
class _Frame:
    """The newest frame of one camera, converted once on arrival.

    ``received`` is on the node clock (freshness); ``processing_s`` is the
    conversion time, for the pipeline latency statistics.
    """

    rgb: np.ndarray
    received: float
    processing_s: float


@dataclass
class _Active:
    """Everything that needs the server metadata; rebuilt on every (re)connect."""

    metadata: dict[str, Any]
    scheduler: ChunkScheduler
    builder: ObservationBuilder
    outputs: list[OutputController]
    used_dims: np.ndarray
    limits: JointLimits
    image_size: tuple[int, int]
    generation: int


class PolicyNode(Node):
    """ROS adapter around the relay_ros policy-streaming logic."""

    def __init__(self, node_name: str = "policy_node", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        try:
            self._setup()
        except BaseException:
            # A configuration error must not leave a half-built node in the graph.
            super().destroy_node()
            raise

    def _setup(self) -> None:
        self._config = self._declare_and_load_parameters()
        cfg = self._config
        allowed, max_cameras = camera_constraints(cfg.model)
        self._cameras: list[CameraEntry] = load_camera_map(
            cfg.camera_map, allowed_keys=allowed, max_cameras=max_cameras
        )
        watched = list(dict.fromkeys(list(cfg.state_joints) + list(cfg.commanded_joints)))
        self._joints = JointStateCache(watched)
        self._frames: dict[str, _Frame] = {}
        self._prompt = cfg.prompt
        self._session_id = uuid.uuid4().hex
        self._enabled = cfg.autostart
        self._active: _Active | None = None
        self._retry_not_before = -math.inf  # node clock; set after a failed request
        self._generation = 0  # tags requests, so replies from before a reconfigure are dropped
        self._config_error: str | None = None
        self._hold_reason: str | None = None
        self._hold_kind: str | None = None
        self._published_since_hold = False
        self._last_refusal: str | None = None
        self._error_messages: dict[str, int] = {}
        self._counts = {
            "requests": 0,
            "chunks_received": 0,
            "chunks_published": 0,
            "error_replies": 0,
            "refusals": 0,
            "connection_errors": 0,
        }
        self._latency = LatencyStats()
        # Where the time goes between a camera frame and the wire (perf_counter based):
        # converting a frame on arrival, and from the decision to request until the
        # observation is written to the socket. Their sum for the newest frame is how
        # long after that frame arrived the observation would be on the wire.
        self._timing = {
            "frame_processing": LatencyStats(),
            "request_to_wire": LatencyStats(),
            "image_to_wire": LatencyStats(),
        }
        self._stall_s = 0.0
        self._trajectory_end: float | None = None
        self._last_tick: float | None = None
        self._events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

        group = MutuallyExclusiveCallbackGroup()
        self._group = group
        for entry in self._cameras:
            qos = qos_profile_sensor_data if entry.qos == "sensor_data" else _RELIABLE
            compressed = entry.transport == "compressed"
            self.create_subscription(
                CompressedImage if compressed else Image,
                entry.topic,
                lambda msg, entry=entry: self._on_image(entry, msg),
                qos,
                callback_group=group,
                # Raw frames are read straight from their CDR bytes (relay_ros.pipeline.image_cdr):
                # building the rclpy message would copy every 900 KiB frame once more.
                raw=not compressed,
            )
        self.create_subscription(
            JointState,
            cfg.joint_states_topic,
            self._on_joint_state,
            _RELIABLE,
            callback_group=group,
        )
        self.create_subscription(
            String, "~/prompt", self._on_prompt, _RELIABLE, callback_group=group
        )

        self._trajectory_pubs: dict[str, Any] = {}
        if not cfg.dry_run:
            for output in cfg.outputs:
                self._trajectory_pubs[output.name] = self.create_publisher(
                    JointTrajectory, output.topic, _RELIABLE
                )
        self._preview = self.create_publisher(JointTrajectory, "~/preview", _RELIABLE)
        self._diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", _RELIABLE)
        self.create_service(Trigger, "~/reset", self._on_reset, callback_group=group)
        self.create_service(SetBool, "~/enable", self._on_enable, callback_group=group)
        self._tick_timer = self.create_timer(1.0 / cfg.tick_hz, self._tick, callback_group=group)
        self._diag_timer = self.create_timer(1.0, self._publish_diagnostics, callback_group=group)

        try:
            self._connection = PolicyConnection(
                cfg.model,
                url=cfg.policy_url,
                reconnect_initial_s=0.25,
                reconnect_max_s=cfg.reconnect_max_backoff_s,
                on_result=lambda outcome: self._events.put(("result", outcome)),
                on_connect=lambda metadata: self._events.put(("connect", metadata)),
                on_disconnect=lambda reason: self._events.put(("disconnect", reason)),
            )
        except KeyError:
            raise ParameterError(
                "no server to connect to: set the 'policy_url' parameter or WALLE_URL "
                "(environment or .env), e.g. ws://127.0.0.1:8000/{model}"
            ) from None
        self.get_logger().info(
            f"policy_node for {cfg.model}: {len(self._cameras)} camera(s), outputs "
            f"{[o.name for o in cfg.outputs]}, {'dry run' if cfg.dry_run else 'commanding'}, "
            f"{'enabled' if self._enabled else 'disabled until ~/enable'}"
        )

    # ------------------------------------------------------------------ parameters
    def _declare(self, spec: ParamSpec) -> Any:
        descriptor = ParameterDescriptor(
            description=spec.description, dynamic_typing=spec.type == "string_or_double"
        )
        value = _PARAM_TYPES[spec.type] if spec.default is None else spec.default
        self.declare_parameter(spec.name, value, descriptor)
        try:
            return self.get_parameter(spec.name).value
        except ParameterUninitializedException:
            return None

    def _declare_and_load_parameters(self) -> NodeConfig:
        values = {spec.name: self._declare(spec) for spec in PARAMETERS}
        for name in values.get("outputs") or []:
            for spec in output_parameter_specs(name):
                values[spec.name] = self._declare(spec)
        commanded = [
            joint
            for name in values.get("outputs") or []
            for joint in values[f"outputs.{name}.joints"] or []
        ]
        for spec in limit_parameter_specs(list(dict.fromkeys(commanded))):
            values[spec.name] = self._declare(spec)
        return build_config(values)

    @property
    def config(self) -> NodeConfig:
        """The validated parameters this node runs with."""
        return self._config

    @property
    def session_id(self) -> str:
        """The session id sent with observations; ``~/reset`` starts a new one."""
        return self._session_id

    @property
    def counts(self) -> dict[str, int]:
        """Requests, chunks, error replies, refusals and connection errors so far."""
        return dict(self._counts)

    @property
    def last_refusal(self) -> str | None:
        """Why the last chunk or observation was refused, in a sentence."""
        return self._last_refusal

    @property
    def hold_reason(self) -> str | None:
        """Why the node is holding position now, or None while it streams."""
        return self._hold_reason

    @property
    def latency(self) -> LatencyStats:
        """Observation -> reply latencies measured on the node clock."""
        return self._latency

    @property
    def pipeline_timing(self) -> dict[str, LatencyStats]:
        """Seconds spent per frame (``frame_processing``), from the decision to
        request to the observation on the wire (``request_to_wire``), and their sum
        for the newest frame of each request (``image_to_wire``)."""
        return dict(self._timing)

    # ------------------------------------------------------------------ inputs
    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_image(self, entry: CameraEntry, msg: Any) -> None:
        arrived = time.perf_counter()
        active = self._active
        if active is None:
            return  # the target size comes with the metadata; frames before it are useless
        try:
            if entry.transport == "compressed":
                rgb = compressed_to_rgb(msg, source=entry.topic, target_size=active.image_size)
            else:
                try:
                    image: Any = parse_image_cdr(msg)
                except CdrImageError:
                    image = deserialize_message(msg, Image)  # an encoding we do not parse
                rgb = image_to_rgb(image, source=entry.topic)
            rgb = resize_with_pad(rgb, *active.image_size)
        except ValueError as exc:
            self._refuse(f"camera '{entry.key}' on {entry.topic}: {exc}", kind="frame", hold=False)
            return
        processing = time.perf_counter() - arrived
        self._timing["frame_processing"].add(processing)
        self._frames[entry.key] = _Frame(rgb, self._now(), processing)

    def _on_joint_state(self, msg: JointState) -> None:
        self._joints.update(list(msg.name), list(msg.position), self._now())

    def _on_prompt(self, msg: String) -> None:
        if msg.data != self._prompt:
            self.get_logger().info(f"prompt changed to {msg.data!r}")
        self._prompt = msg.data

    # ------------------------------------------------------------------ services
    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self._session_id = uuid.uuid4().hex
        self._connection.request_reset()
        if self._active is not None:
            self._active.scheduler.reset()
        self._hold("episode reset: waiting for a chunk from the new session", kind="reset")
        response.success = True
        response.message = f"new episode, session {self._session_id}"
        self.get_logger().info(response.message)
        return response

    def _on_enable(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        if request.data and not self._enabled:
            self._enabled = True
            self._hold_reason = self._hold_kind = None
            response.message = "enabled: commanding from the next fresh observation"
        elif not request.data and self._enabled:
            self._hold("disabled through ~/enable", kind="disabled")
            self._enabled = False
            response.message = "disabled: holding position"
        else:
            response.message = "already " + ("enabled" if self._enabled else "disabled")
        response.success = True
        self.get_logger().info(response.message)
        return response

    # ------------------------------------------------------------------ connection events
    def _configure(self, metadata: dict[str, Any]) -> None:
        cfg = self._config
        try:
            model = metadata.get("model", cfg.model)
            if model != cfg.model:
                raise ParameterError(f"server serves model {model!r}, node is set to {cfg.model!r}")
            allowed, max_cameras = camera_constraints(cfg.model, metadata)
            load_camera_map(cfg.camera_map, allowed_keys=allowed, max_cameras=max_cameras)
            horizon = int(metadata["action_horizon"])
            control_hz = cfg.control_hz or float(metadata.get("control_hz") or 0.0)
            if control_hz <= 0:
                raise ParameterError(
                    "server metadata has no control_hz; set the 'control_hz' parameter"
                )
            execute = cfg.execute_horizon or max(1, horizon // 2)
            scheduler = ChunkScheduler(
                SchedulerConfig(
                    dt=1.0 / control_hz,
                    horizon=horizon,
                    execute_horizon=execute,
                    request_lead_s=cfg.request_lead_s,
                    blend_steps=cfg.blend_steps,
                    mode=cfg.request_mode,
                    # The timer polls every tick: publish up to one tick before the
                    # switch so that no action slot is skipped at the boundary.
                    publish_early_s=min(1.0 / cfg.tick_hz, 0.5 / control_hz),
                )
            )
            outputs = load_outputs(
                {o.name: o.as_mapping() for o in cfg.outputs}, model=cfg.model, metadata=metadata
            )
            used = np.array([d for o in outputs for d in o.dims], dtype=np.intp)
            joints = [j for o in outputs for j in o.joints]
            limits = JointLimits.from_mapping(cfg.joint_limits, joints)
            builder = ObservationBuilder(
                cfg.model,
                metadata,
                camera_keys=[c.key for c in self._cameras],
                state_joints=cfg.state_joints,
            )
            height, width = (int(v) for v in metadata["image_size"])
        except (ParameterError, ValueError, KeyError) as exc:
            self._config_error = f"configuration does not fit the server: {exc}"
            self._active = None
            self.get_logger().error(self._config_error)
            return
        self._config_error = None
        self._frames.clear()
        self._generation += 1
        self._active = _Active(
            metadata=metadata,
            scheduler=scheduler,
            builder=builder,
            outputs=outputs,
            used_dims=used,
            limits=limits,
            image_size=(height, width),
            generation=self._generation,
        )
        self.get_logger().info(
            f"connected: {cfg.model}, horizon {horizon}, dt {1000.0 / control_hz:.1f} ms, "
            f"execute {execute}, {cfg.request_mode} requests"
        )

    def _handle_result(self, outcome: InferOutcome, now: float) -> None:
        active = self._active
        generation, session_id, t_obs, started, frame_processing = outcome.tag  # type: ignore[misc]
        if outcome.sent_at is not None:
            to_wire = outcome.sent_at - started
            self._timing["request_to_wire"].add(to_wire)
            self._timing["image_to_wire"].add(frame_processing + to_wire)
        if active is None or generation != active.generation:
            return  # a reply from before a reconnect: that scheduler is gone
        scheduler = active.scheduler
        if session_id != self._session_id:
            # Sent before ~/reset: never execute it, but free the request slot.
            if scheduler.request_in_flight:
                scheduler.request_failed(now, "reply to an observation from before the reset")
            return
        if outcome.connection_error is not None:
            self._counts["connection_errors"] += 1
            scheduler.request_failed(now)
            self._back_off(now)
            self._hold(
                f"connection lost during a request: {outcome.connection_error}", kind="connection"
            )
            return
        reply = outcome.reply
        if isinstance(reply, dict) and reply.get("type") == "error":
            message = str(reply.get("message"))
            self._counts["error_replies"] += 1
            seen = self._error_messages.get(message, 0)
            self._error_messages[message] = seen + 1
            if seen == 0:
                self.get_logger().error(f"server refused the observation: {message}")
            scheduler.request_failed(now)
            self._back_off(now)
            self._hold(f"error reply from the server: {message}", kind="error_reply")
            return
        self._latency.add(now - t_obs)
        self._counts["chunks_received"] += 1
        try:
            chunk = reply_to_chunk(reply, active.metadata)[:, active.used_dims]
        except ValueError as exc:
            self._counts["error_replies"] += 1
            scheduler.request_failed(now)
            self._back_off(now)
            self._refuse(f"malformed reply: {exc}", kind="malformed_reply")
            return
        result = check_chunk(chunk, active.limits, mode=self._config.limits_mode)
        if result.refusal is not None:
            scheduler.request_failed(now)
            self._back_off(now)
            self._refuse(result.refusal.reason, kind="unsafe_chunk")
            return
        scheduler.chunk_received(result.chunk, t_obs, now)

    def _drain_events(self, now: float) -> None:
        while True:
            try:
                kind, payload = self._events.get_nowait()
            except queue.Empty:
                return
            if kind == "connect":
                self._configure(payload)
            elif kind == "disconnect":
                self._counts["connection_errors"] += 1
                self._hold(f"disconnected from the policy server: {payload}", kind="connection")
                self._active = None
            elif kind == "result":
                self._handle_result(payload, now)

    # ------------------------------------------------------------------ the loop
    def _tick(self) -> None:
        now = self._now()
        self._drain_events(now)
        self._account_stall(now)
        active = self._active
        if active is None or not self._enabled:
            return
        scheduler = active.scheduler
        publication = scheduler.poll(now)
        if publication is not None:
            self._publish_chunk(publication, now)
        if now >= self._retry_not_before and scheduler.wants_request(now):
            self._request(active, now)

    def _request(self, active: _Active, now: float) -> None:
        started = time.perf_counter()
        cfg = self._config
        stamps = {f"camera '{key}'": frame.received for key, frame in self._frames.items()}
        missing = [c.key for c in self._cameras if c.key not in self._frames]
        if missing:
            self._hold(f"no frame yet from camera(s) {missing}", kind="missing_input", refusal=True)
            return
        refusal = check_fresh(stamps, now, cfg.sensor_timeout_s)
        if refusal is not None:
            self._hold(f"stale observation: {refusal.reason}", kind="stale_input", refusal=True)
            return
        try:
            state = self._joints.vector(now, cfg.sensor_timeout_s)
        except (MissingJointsError, StaleInputError) as exc:
            self._hold(f"joint states: {exc}", kind="joint_states", refusal=True)
            return
        state_vector = state[: len(cfg.state_joints)]
        observation = active.builder.build(
            {key: frame.rgb for key, frame in self._frames.items()},
            state_vector,
            self._prompt,
            session_id=self._session_id,
            seed=cfg.seed,
            observation_time=now,
        )
        newest = max(self._frames.values(), key=lambda frame: frame.received)
        tag = (active.generation, self._session_id, now, started, newest.processing_s)
        if self._connection.submit(observation, tag):
            active.scheduler.request_sent(now)
            self._counts["requests"] += 1

    def _publish_chunk(self, publication: Publication, now: float) -> None:
        active = self._active
        assert active is not None
        cfg = self._config
        measured = self._measured_commanded(now)
        if measured is not None:
            refusal = check_first_step(
                measured, publication.positions[0], cfg.max_joint_step, cfg.commanded_joints
            )
            if refusal is not None:
                self._back_off(now)
                self._refuse(refusal.reason, kind="first_step")
                return
        stamp = _time_msg(publication.stamp)
        # joint_trajectory_controller ignores header.frame_id; carrying the observation
        # time there lets the simulated arm (and bag readers) measure action age.
        tag = format_t_obs(publication.t_obs)
        column = 0
        for output in active.outputs:
            width = len(output.joints)
            points = build_points(publication, range(column, column + width))
            column += width
            msg = _trajectory_msg(stamp, tag, output.joints, points)
            if cfg.dry_run:
                self._preview.publish(msg)
            else:
                self._trajectory_pubs[output.name].publish(msg)
        if not cfg.dry_run:
            all_points = build_points(publication, range(column))
            self._preview.publish(_trajectory_msg(stamp, tag, cfg.commanded_joints, all_points))
        self._counts["chunks_published"] += 1
        self._trajectory_end = publication.stamp + float(publication.time_from_start[-1])
        self._published_since_hold = True
        if self._hold_reason is not None:
            self.get_logger().info(f"streaming again after: {self._hold_reason}")
        self._hold_reason = self._hold_kind = None

    def _measured_commanded(self, now: float) -> np.ndarray | None:
        try:
            vector = self._joints.vector(now, self._config.sensor_timeout_s)
        except (MissingJointsError, StaleInputError):
            return None
        order = {name: i for i, name in enumerate(self._joints.joint_names)}
        return np.array([vector[order[j]] for j in self._config.commanded_joints])

    # ------------------------------------------------------------------ safety outcomes
    def _back_off(self, now: float) -> None:
        """No request for ``retry_delay_s``: a failing observation is not resent at 100 Hz."""
        self._retry_not_before = now + self._config.retry_delay_s

    def _refuse(self, reason: str, *, kind: str, hold: bool = True) -> None:
        """A chunk or frame was refused by a safety check: count it, say why, hold."""
        self._counts["refusals"] += 1
        self._last_refusal = reason
        if hold:
            self._hold(reason, kind=kind)
        else:
            self.get_logger().warning(reason, throttle_duration_sec=5.0)

    def _hold(self, reason: str, *, kind: str, refusal: bool = False) -> None:
        """Stop following chunks: command the current position and say why.

        ``kind`` groups reasons whose text changes from tick to tick (a stale input's
        age): the log line is written when the kind changes, while ``/diagnostics``
        always shows the latest reason.
        """
        if refusal:
            self._last_refusal = reason
        repeated = self._hold_kind == kind and self._hold_reason is not None
        self._hold_reason = reason
        self._hold_kind = kind
        if repeated:
            return
        if self._counts["chunks_published"] == 0 and kind in ("missing_input", "joint_states"):
            # Start-up: inputs not there yet is expected, not a fault.
            self.get_logger().info(f"waiting before the first request: {reason}")
        else:
            self.get_logger().warning(f"holding position: {reason}")
        now = self._now()
        active = self._active
        if active is not None:
            commanded = active.scheduler.last_commanded(now)
            active.scheduler.reset()
        else:
            commanded = None
        if not self._published_since_hold:
            return  # nothing of ours is moving the robot
        position = commanded if commanded is not None else self._measured_commanded(now)
        if position is None:
            return
        self._published_since_hold = False
        self._trajectory_end = None
        self._publish_hold(np.asarray(position, dtype=float), now)

    def _publish_hold(self, position: np.ndarray, now: float) -> None:
        cfg = self._config
        stamp = _time_msg(now)
        column = 0
        # Reach the hold point over a few cycles, not one: a message that arrives a
        # little late must not already "end in the past" for the controller.
        dt = 0.0 if self._active is None else self._active.scheduler.config.dt
        sec, nanosec = seconds_to_sec_nanosec(max(dt, _HOLD_TIME_S))
        for output in cfg.outputs:
            width = len(output.joints)
            msg = JointTrajectory()
            msg.header.stamp = stamp
            msg.joint_names = list(output.joints)
            point = JointTrajectoryPoint()
            point.positions = [float(v) for v in position[column : column + width]]
            point.velocities = [0.0] * width
            point.time_from_start = DurationMsg(sec=sec, nanosec=nanosec)
            msg.points = [point]
            column += width
            (self._preview if cfg.dry_run else self._trajectory_pubs[output.name]).publish(msg)

    def _account_stall(self, now: float) -> None:
        last = self._last_tick
        self._last_tick = now
        end = self._trajectory_end
        if last is None or end is None or not self._enabled or self._hold_reason is not None:
            return
        if now > end:
            self._stall_s += now - max(last, end)

    # ------------------------------------------------------------------ diagnostics
    def diagnostics_status(self) -> DiagnosticStatus:
        """The node's health as one DiagnosticStatus (also published at 1 Hz)."""
        status = DiagnosticStatus()
        status.name = f"{self.get_name()}: policy"
        status.hardware_id = self._config.model
        connected = self._connection.connected
        if self._config_error is not None:
            status.level = DiagnosticStatus.ERROR
            status.message = self._config_error
        elif not connected:
            status.level = DiagnosticStatus.ERROR
            status.message = "not connected to the policy server" + (
                f": {self._connection.last_error}" if self._connection.last_error else ""
            )
        elif not self._enabled:
            status.level = DiagnosticStatus.WARN
            status.message = "disabled (call ~/enable)"
        elif self._hold_reason is not None:
            status.level = DiagnosticStatus.WARN
            status.message = f"holding position: {self._hold_reason}"
        else:
            status.level = DiagnosticStatus.OK
            status.message = "streaming"
        p50 = self._latency.percentile(50)
        p99 = self._latency.percentile(99)
        values = {
            "connected": str(connected),
            "enabled": str(self._enabled),
            "dry_run": str(self._config.dry_run),
            "session_id": self._session_id,
            "latency_p50_ms": "" if p50 is None else f"{p50 * 1000:.1f}",
            "latency_p99_ms": "" if p99 is None else f"{p99 * 1000:.1f}",
            "stall_time_s": f"{self._stall_s:.3f}",
            "last_refusal": self._last_refusal or "",
            "hold_reason": self._hold_reason or "",
            **{key: str(value) for key, value in self._counts.items()},
        }
        for name, stats in self._timing.items():
            for q in (50, 99):
                value = stats.percentile(q)
                values[f"{name}_p{q}_ms"] = "" if value is None else f"{value * 1000:.2f}"
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        return status

    def _publish_diagnostics(self) -> None:
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status = [self.diagnostics_status()]
        self._diagnostics.publish(array)

    # ------------------------------------------------------------------ lifetime
    def destroy_node(self) -> None:
        """Stop the connection worker (joins its thread, closes its socket) and the node."""
        self._connection.close()
        super().destroy_node()


def _time_msg(seconds: float) -> TimeMsg:
    sec, nanosec = seconds_to_sec_nanosec(seconds)
    return TimeMsg(sec=sec, nanosec=nanosec)


def _trajectory_msg(stamp: TimeMsg, frame_id: str, joints: Any, points: Any) -> JointTrajectory:
    msg = JointTrajectory()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    msg.joint_names = list(joints)
    out = []
    for positions, velocities, (sec, nanosec) in zip(
        points.positions.tolist(), points.velocities.tolist(), points.time_from_start_sec_nanosec
    ):
        point = JointTrajectoryPoint()
        point.positions = positions
        point.velocities = velocities
        point.time_from_start = DurationMsg(sec=sec, nanosec=nanosec)
        out.append(point)
    msg.points = out
    return msg


def main(args: list[str] | None = None) -> None:
    """Console entry point ``policy_node``."""
    rclpy.init(args=args)
    node = None
    try:
        node = PolicyNode()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except (ParameterError, CameraMapError, OutputsError, SafetyError) as exc:
        # A configuration mistake: say what is wrong in one line, not a traceback.
        rclpy.logging.get_logger("policy_node").fatal(f"{type(exc).__name__}: {exc}")
        raise SystemExit(2) from None
    finally:
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


if __name__ == "__main__":
    main()
