"""policy_node: cameras and joint states in, action chunks out to ros2_control.

This node only wires ROS to :class:`~relay_ros.pipeline.streaming.StreamingCore`,
which decides everything (when to request, what is safe to publish, when to hold):

- camera messages (:mod:`relay_ros.pipeline.camera_map`; raw frames as their CDR
  bytes) are handed to the core as they arrive, which converts only the ones an
  observation uses (:mod:`relay_ros.pipeline.camera_frames`), with joint states
  and prompts;
- a timer ticks the core; the observations it submits go to
  :class:`~relay_ros.wire.connection.PolicyConnection`, whose worker thread talks to
  the server, so no ROS callback ever waits on the network;
- connection events and replies come back through a queue drained on each tick;
- the core's trajectories become ``JointTrajectory`` messages on each controller's
  topic (or ``~/preview``), its health ``/diagnostics`` at 1 Hz.

Threading: every subscription, timer and service callback of this node is in one
MutuallyExclusiveCallbackGroup, so the core is only touched by one executor
thread at a time, whatever executor spins it. The only other thread is the
connection worker, which talks to the node through a thread-safe queue; every
callback is short (the longest converts the frames of one observation, a few ms),
so ``main()`` spins a SingleThreadedExecutor. rclpy 7.1's MultiThreadedExecutor was measured here to
skip timer periods for 0.3-1 s at a time with this node and a 30 Hz publisher in
one process, which would stall the robot; the single-threaded one never did.
"""

from __future__ import annotations

import queue
from typing import Any

import rclpy
from builtin_interfaces.msg import Duration as DurationMsg
from builtin_interfaces.msg import Time as TimeMsg
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String
from std_srvs.srv import SetBool, Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from relay_ros.node.debug_topics import ObservationTopics
from relay_ros.node.params import NodeConfig, ParameterError
from relay_ros.node.ros_logging import node_logger
from relay_ros.node.ros_params import LiveParameters, declare_parameters
from relay_ros.pipeline.camera_map import CameraEntry, CameraMapError, load_model_camera_map
from relay_ros.pipeline.health import assess
from relay_ros.pipeline.stats import LatencyStats
from relay_ros.pipeline.streaming import StreamingCore, TrajectoryMessage
from relay_ros.wire.connection import PolicyConnection

__all__ = ["PolicyNode", "main"]

_RELIABLE = QoSProfile(
    depth=10, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE
)


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
        self._config = cfg = self._declare_and_load_parameters()
        self._cameras: list[CameraEntry] = load_model_camera_map(cfg.camera_map, cfg.model)
        self._events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._trajectory_pubs: dict[str, Any] = {}
        self._topics = {output.name: output.topic for output in cfg.outputs}
        if not cfg.dry_run:
            for name in self._topics:
                self._output_publisher(name)
        self._preview = self.create_publisher(JointTrajectory, "~/preview", _RELIABLE)
        self._diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", _RELIABLE)
        try:
            self._connection = PolicyConnection(
                cfg.model,
                url=cfg.policy_url,
                reconnect_initial_s=0.25,
                reconnect_max_s=cfg.reconnect_max_backoff_s,
                on_result=lambda outcome: self._events.put(("result", outcome)),
                on_connect=lambda metadata: self._events.put(("connect", metadata)),
                on_disconnect=lambda reason: self._events.put(("disconnect", reason)),
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
            self, [c.key for c in self._cameras], cfg.state_joints
        )
        self.core = StreamingCore(
            cfg,
            camera_keys=[c.key for c in self._cameras],
            submit=self._submit,
            publish=self._publish,
            request_reset=self._connection.request_reset,
            log=self.get_logger(),
            cameras=self._cameras,
            # An Image encoding the CDR reader does not parse: rclpy's deserializer.
            deserialize=lambda buffer: deserialize_message(buffer, Image),
        )

        # Parameter services run in the default group: sharing it keeps a live
        # parameter change from running beside a tick, whatever executor spins the node.
        group = self.default_callback_group
        for entry in self._cameras:
            compressed = entry.transport == "compressed"
            self.create_subscription(
                CompressedImage if compressed else Image,
                entry.topic,
                lambda msg, entry=entry: self._on_image(entry, msg),
                qos_profile_sensor_data if entry.qos == "sensor_data" else _RELIABLE,
                callback_group=group,
                # Raw frames are read straight from their CDR bytes (pipeline.image_cdr):
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
            String,
            "~/prompt",
            self._on_prompt,
            _RELIABLE,
            callback_group=group,
        )
        self.create_service(Trigger, "~/reset", self._on_reset, callback_group=group)
        self.create_service(SetBool, "~/enable", self._on_enable, callback_group=group)
        self._tick_timer = self.create_timer(1.0 / cfg.tick_hz, self._tick, callback_group=group)
        self._diag_timer = self.create_timer(1.0, self._publish_diagnostics, callback_group=group)
        self._live = LiveParameters(self, cfg, self._apply_config)
        self.get_logger().info(
            f"policy_node for {cfg.model}: {len(self._cameras)} camera(s), outputs "
            f"{[o.name for o in cfg.outputs]}, {'dry run' if cfg.dry_run else 'commanding'}, "
            f"{'enabled' if cfg.autostart else 'disabled until ~/enable'}"
        )

    # ------------------------------------------------------------------ parameters
    def _declare_and_load_parameters(self) -> NodeConfig:
        return declare_parameters(self)

    def _apply_config(self, config: NodeConfig) -> None:
        """A live parameter change (validated by LiveParameters), in force when this returns."""
        self.core.apply_config(config, self._now())
        self._config = config

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
        self.core.frame_arrived(entry.key, msg, self._now())

    def _on_joint_state(self, msg: JointState) -> None:
        self.core.joint_state(msg.name, msg.position, self._now())

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.message = self.core.reset_episode(self._now())
        response.success = True
        return response

    def _on_enable(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        response.message = self.core.set_enabled(request.data, self._now())
        response.success = True
        return response

    def _submit(self, observation: dict[str, Any], tag: Any) -> bool:
        if not self._connection.submit(observation, tag):
            return False
        self._observation_topics.publish(observation, tag.t_obs)
        return True

    def _tick(self) -> None:
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
            else:
                self.core.result(payload, now)
        self.core.tick(now)

    # ------------------------------------------------------------------ outputs
    def _output_publisher(self, name: str) -> Any:
        publisher = self._trajectory_pubs.get(name)
        if publisher is None:
            publisher = self.create_publisher(JointTrajectory, self._topics[name], _RELIABLE)
            self._trajectory_pubs[name] = publisher
        return publisher

    def _publish(self, message: TrajectoryMessage) -> None:
        points = message.points
        msg = JointTrajectory()
        msg.header.stamp = TimeMsg(
            sec=points.stamp_sec_nanosec[0], nanosec=points.stamp_sec_nanosec[1]
        )
        msg.header.frame_id = message.frame_id
        msg.joint_names = list(message.joint_names)
        out = []
        for positions, velocities, (sec, nanosec) in zip(
            points.positions.tolist(),
            points.velocities.tolist(),
            points.time_from_start_sec_nanosec,
        ):
            point = JointTrajectoryPoint()
            point.positions = positions
            point.velocities = velocities
            point.time_from_start = DurationMsg(sec=sec, nanosec=nanosec)
            out.append(point)
        msg.points = out
        if message.output is None:
            self._preview.publish(msg)
        else:
            self._output_publisher(message.output).publish(msg)

    def diagnostics_status(self) -> DiagnosticStatus:
        """The node's health as one DiagnosticStatus (also published at 1 Hz)."""
        health = assess(
            self.core,
            self._now(),
            connected=self._connection.connected,
            connection_error=self._connection.last_error,
        )
        status = DiagnosticStatus()
        status.name = f"{self.get_name()}: policy"
        status.hardware_id = self._config.model
        status.level = bytes([int(health.level)])
        status.message = health.message
        status.values = [KeyValue(key=k, value=v) for k, v in health.values.items()]
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
        self.core.frames.close()
        super().destroy_node()


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
    except (ParameterError, CameraMapError) as exc:
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
