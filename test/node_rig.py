"""A test rig around policy_node: a real reference server, real DDS, real messages.

A ``Rig`` runs, in one SingleThreadedExecutor spinning on a background thread
(as policy_node's ``main()`` does):
the :class:`~relay_ros.node.policy_node.PolicyNode` under test, a feeder node that
publishes camera frames (one raw ``Image``, one ``CompressedImage``) and joint
states, and recorders for everything the node publishes. Topics are prefixed
per rig so tests in one pytest session never hear each other.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from helpers import scaled, wait_until
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from rclpy.time import Time
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String
from trajectory_checker import VelocityChecker, robot_velocity_limits
from trajectory_msgs.msg import JointTrajectory

from relay_ros.node.policy_node import PolicyNode
from relay_ros.paths import config_dir

_COUNTER = itertools.count()

PI_JOINTS = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper_joint"]
GROOT_JOINTS = ["joint1", "joint2", "joint3", "joint4", "joint5", "gripper_joint"]


def velocity_overrides(joints: list[str], max_velocity: float) -> dict[str, float]:
    """``joint_limits.<joint>.max_velocity`` parameters raising every velocity limit (for
    tests of other checks whose policies step faster than the shipped limits)."""
    return {f"joint_limits.{joint}.max_velocity": float(max_velocity) for joint in joints}


@contextlib.contextmanager
def spinning(*executors: Executor) -> Iterator[list[threading.Thread]]:
    """Spin each executor on a thread of its own while the block runs (yields the threads).

    On exit the loops stop first and the executors shut down after: shutting one
    down under a running spin() can destroy its guard condition mid-spin_once
    (InvalidHandle in the spin thread, seen under load).
    """
    stopping = threading.Event()

    def spin(executor: Executor) -> None:
        while not stopping.is_set():
            executor.spin_once(timeout_sec=0.05)

    threads = [threading.Thread(target=spin, args=(e,), daemon=True) for e in executors]
    for thread in threads:
        thread.start()
    try:
        yield threads
    finally:
        stopping.set()
        for thread in threads:
            thread.join(timeout=scaled(5.0))
        for executor in executors:
            executor.shutdown(timeout_sec=scaled(5.0))


@contextlib.contextmanager
def watched_controllers(
    context: Any,
    model: str,
    topics: list[str],
    joint_states_topic: str = "/joint_states",
    *,
    sim_time: bool = False,
    from_desired_state: bool = True,
) -> Iterator[VelocityChecker]:
    """A velocity checker fed by a node of its own (spun on a thread while the block
    runs) with every trajectory on ``topics``, the arm measured from
    ``joint_states_topic`` at each message's header stamp: for a loop whose nodes a
    test does not build (the demo, a replay: ``sim_time``, on its /clock).
    ``from_desired_state``: the controller's ``interpolate_from_desired_state``
    (:class:`~trajectory_checker.VelocityChecker`)."""
    overrides = [Parameter("use_sim_time", value=True)] if sim_time else []
    node = Node(
        f"controller_watch_{next(_COUNTER)}", context=context, parameter_overrides=overrides
    )
    latest: dict[str, float] = {}
    measured_at = [-math.inf]
    lock = threading.Lock()

    def on_joints(msg: JointState) -> None:
        with lock:
            latest.update(zip(msg.name, msg.position))
            measured_at[0] = stamp_of(msg)

    def measured() -> tuple[dict[str, float], float]:
        with lock:
            return dict(latest), measured_at[0]

    checker = VelocityChecker(
        robot_velocity_limits(model),
        measured,
        name=f"watch {topics}",
        from_desired_state=from_desired_state,
    )

    def on_trajectory(topic: str, msg: JointTrajectory, info: Any) -> None:
        arrived = received_at(node, info)  # (a zero stamp starts then)
        if not msg.points or not set(msg.joint_names) <= set(measured()[0]):
            return  # (before the first joint state: nothing to start from)
        check_message(checker, topic, msg, arrived)

    node.create_subscription(JointState, joint_states_topic, on_joints, 100)
    for topic in topics:
        node.create_subscription(
            JointTrajectory,
            topic,
            lambda msg, info, topic=topic: on_trajectory(topic, msg, info),
            100,
        )
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        with spinning(executor):
            yield checker
    finally:
        node.destroy_node()


def check_message(
    checker: VelocityChecker, topic: str, msg: JointTrajectory, arrived: float
) -> None:
    """Hand one received ``JointTrajectory`` (with points) to ``checker``: its points,
    their velocities (zero where the message has none) and when it arrived."""
    positions = np.array([p.positions for p in msg.points], dtype=float)
    velocities = np.array(
        [p.velocities if len(p.velocities) else [0.0] * positions.shape[1] for p in msg.points],
        dtype=float,
    )
    checker.add(
        topic,
        list(msg.joint_names),
        stamp_of(msg),
        tfs_of(msg),
        positions,
        velocities,
        received=arrived,
    )


def received_at(node: Node, info: Any) -> float:
    """When a message reached this process, on ``node``'s clock: the middleware's
    reception time (``info``, the message info of a two-argument subscription callback),
    not when the callback ran. A controller adopts a trajectory when it arrives; the
    rig's callbacks share one executor with the node under test and, on a loaded
    machine, run up to a second later (a controller_manager, with an executor of its
    own, is not held up by them)."""
    now = node.get_clock().now().nanoseconds * 1e-9
    received_ns = int(info.get("received_timestamp", 0) or 0) if info else 0
    if received_ns <= 0:
        return now
    return now - max(0.0, (time.time_ns() - received_ns) * 1e-9)


def t_obs_of(msg: JointTrajectory) -> float:
    """The observation time the node writes into header.frame_id."""
    assert msg.header.frame_id.startswith("t_obs="), msg.header.frame_id
    return float(msg.header.frame_id[len("t_obs=") :])


def stamp_of(msg: JointTrajectory) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def tfs_of(msg: JointTrajectory) -> np.ndarray:
    return np.array([p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points])


@dataclass
class Received:
    """Messages a rig recorded, with the wall time each arrived."""

    arm: list[JointTrajectory] = field(default_factory=list)
    gripper: list[JointTrajectory] = field(default_factory=list)
    preview: list[JointTrajectory] = field(default_factory=list)
    diagnostics: list[DiagnosticArray] = field(default_factory=list)
    #: id() of each recorded trajectory -> when it reached the rig's process (node clock,
    #: s; :func:`received_at`): a hold is stamped zero and starts on arrival, so its
    #: arrival is its start.
    arrivals: dict[int, float] = field(default_factory=dict)

    def start_of(self, msg: JointTrajectory) -> float:
        """When the controller starts ``msg``: its stamp, or its arrival for a zero stamp."""
        return stamp_of(msg) or self.arrivals[id(msg)]


class Rig:
    """policy_node wired to a feeder and recorders; use as a context manager."""

    def __init__(
        self,
        context: Any,
        server_url: str,
        *,
        model: str = "pi05",
        overrides: dict[str, Any] | None = None,
        width: int = 64,
        height: int = 48,
        state: list[float] | None = None,
        camera_hz: float = 30.0,
        follow: bool = True,
        without_limits: bool = False,
        tmp_path: Path,
    ) -> None:
        self.context = context
        self.model = model
        n = next(_COUNTER)
        self.prefix = f"/rig{n}"
        self.node_name = f"policy_node_{n}"
        # The node's /diagnostics statuses (policy, recording): named by its fully
        # qualified name.
        self.status_prefix = f"/{self.node_name}: "
        joints = GROOT_JOINTS if model == "groot" else PI_JOINTS
        self.joints = list(joints)
        self.state = np.array(state if state is not None else [0.1] * len(joints), dtype=float)
        self.cameras_on = True
        # True: the raw camera sends 16UC1 depth frames (an encoding the node refuses).
        self.depth_camera = False
        self.joint_states_on = True
        # Added to the published joint states (not to the arm), given the sample's number:
        # a glitching encoder or bus.
        self.joint_glitch: Callable[[int], np.ndarray] | None = None
        self._joint_samples = 0
        # None: one joint state per timer call, stamped when sent. A period: a driver
        # measuring every period, each sample stamped with its measurement time; when
        # the timer runs late (a loaded machine), the samples due are sent together.
        self.joint_sample_period: float | None = None
        self._next_sample: float | None = None
        # The joint states follow what the controllers are sent (a perfect controller,
        # linear between points); False: the arm stands still at ``state``.
        self.follow = follow
        self._following: dict[str, tuple[list[int], np.ndarray, np.ndarray, np.ndarray]] = {}
        self.received = Received()
        self._lock = threading.Lock()

        camera_keys = (
            ["video.front", "video.wrist"]
            if model == "groot"
            else ["base_0_rgb", "left_wrist_0_rgb"]
        )
        self.raw_topic = f"{self.prefix}/camera/base/image_raw"
        self.compressed_topic = f"{self.prefix}/camera/wrist/image_raw/compressed"
        camera_map = tmp_path / f"cameras_{n}.yaml"
        camera_map.write_text(
            yaml.safe_dump(
                {
                    camera_keys[0]: {"topic": self.raw_topic},
                    camera_keys[1]: {"topic": self.compressed_topic},
                }
            )
        )
        self.arm_topic = f"{self.prefix}/arm_controller/joint_trajectory"
        self.gripper_topic = f"{self.prefix}/gripper_controller/joint_trajectory"
        params: dict[str, Any] = {
            "policy_url": server_url,
            "camera_map": str(camera_map),
            "joint_states_topic": f"{self.prefix}/joint_states",
            "outputs.arm.topic": self.arm_topic,
            "outputs.gripper.topic": self.gripper_topic,
            "prompt": "stack the blocks",
        }
        params.update(overrides or {})
        params_file = config_dir() / f"{model}.yaml"
        if without_limits:  # the shipped file without its joint_limits: the URDF gives them
            data = yaml.safe_load(params_file.read_text())
            data["/**"]["ros__parameters"].pop("joint_limits")
            params_file = tmp_path / f"params_{n}.yaml"
            params_file.write_text(yaml.safe_dump(data))
        self.node = PolicyNode(
            self.node_name,
            context=context,
            cli_args=["--ros-args", "--params-file", str(params_file)],
            parameter_overrides=[Parameter(k, value=v) for k, v in params.items()],
        )
        # Every trajectory a controller receives is checked against the robot's velocity
        # limits (not ones a test raised) as the controller the node is configured for
        # would run it; conftest.py judges the checker when the test ends.
        self._state_time = -math.inf  # when self.state was last brought up to date
        configured = None if self.node.lifecycle_state == "unconfigured" else self.node.config
        self.checker = VelocityChecker(
            robot_velocity_limits(model),
            self._measured,
            name=self.node_name,
            from_desired_state=(
                True if configured is None else bool(configured.interpolate_from_desired_state)
            ),
        )
        # On the node's clock (the arm follows the trajectories' stamps).
        sim_time = [Parameter("use_sim_time", value=True)] if params.get("use_sim_time") else []
        self.feeder = Node(f"feeder_{n}", context=context, parameter_overrides=sim_time)
        self._image_pub = self.feeder.create_publisher(
            Image, self.raw_topic, qos_profile_sensor_data
        )
        self._jpeg_pub = self.feeder.create_publisher(
            CompressedImage, self.compressed_topic, qos_profile_sensor_data
        )
        self._joint_pub = self.feeder.create_publisher(
            JointState, f"{self.prefix}/joint_states", 10
        )
        self._prompt_pub = self.feeder.create_publisher(String, f"/{self.node_name}/prompt", 10)
        frame = np.zeros((height, width, 3), np.uint8)
        frame[:, : width // 2] = (200, 30, 30)
        self._frame = frame
        # The compressed camera's payload (a test may replace it: a decompression bomb).
        self.jpeg = cv2.imencode(".jpg", frame[:, :, ::-1])[1].tobytes()
        self.feeder.create_timer(1.0 / camera_hz, self._publish_cameras)
        self.feeder.create_timer(0.01, self._publish_joints)
        self._subscribe(self.arm_topic, self.received.arm, checked=True)
        self._subscribe(self.gripper_topic, self.received.gripper, checked=True)
        self._subscribe(f"/{self.node_name}/preview", self.received.preview)
        self.feeder.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.executor.add_node(self.feeder)
        self._spinning = spinning(self.executor)

    def _subscribe(self, topic: str, sink: list, *, checked: bool = False) -> None:
        def record(msg: JointTrajectory, info: Any) -> None:
            arrived = received_at(self.feeder, info)
            with self._lock:
                sink.append(msg)
                self.received.arrivals[id(msg)] = arrived
            if checked and msg.points and self.follow:
                self._start_following(topic, msg)
            if checked and msg.points:
                check_message(self.checker, topic, msg, arrived)

        self.feeder.create_subscription(JointTrajectory, topic, record, 10)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        if any(status.name.startswith(self.status_prefix) for status in msg.status):
            with self._lock:
                self.received.diagnostics.append(msg)

    def _publish_cameras(self) -> None:
        if not self.cameras_on:
            return
        stamp = self.feeder.get_clock().now().to_msg()
        h, w, _ = self._frame.shape
        if self.depth_camera:
            depth = np.full((h, w), 1000, dtype=np.uint16).tobytes()
            image = Image(height=h, width=w, encoding="16UC1", step=w * 2, data=depth)
        else:
            image = Image(
                height=h, width=w, encoding="rgb8", step=w * 3, data=self._frame.tobytes()
            )
        image.header.stamp = stamp
        self._image_pub.publish(image)
        jpeg = CompressedImage(format="jpeg", data=self.jpeg)
        jpeg.header.stamp = stamp
        self._jpeg_pub.publish(jpeg)

    def _start_following(self, topic: str, msg: JointTrajectory) -> None:
        index = [self.joints.index(j) for j in msg.joint_names]
        now = self.feeder.get_clock().now().nanoseconds * 1e-9
        point_times = (stamp_of(msg) or now) + tfs_of(msg)  # a zero stamp starts on arrival
        ahead = point_times > now
        if not ahead.any():
            return  # it ends in the past (a late message, a clock jump): JTC rejects it
        # Points already due (a message delayed under load, or stamped on the far side
        # of a clock jump) are passed: from where it is, the arm heads for the next one
        # ahead. (Interpolating over times that go back would teleport the arm.)
        times = np.concatenate(([now], point_times[ahead]))
        positions = np.array([p.positions for p in msg.points], dtype=float)[ahead]
        with self._lock:
            start = self.state[index].copy()
            self._following[topic] = (index, start, times, positions)

    def _measured(self) -> tuple[dict[str, float], float]:
        """The arm's state and the time (feeder clock) it is the state of."""
        with self._lock:
            state = dict(zip(self.joints, self.state.tolist()))
            time = self._state_time
        if not self.follow:
            time = self.feeder.get_clock().now().nanoseconds * 1e-9  # it stands still
        return state, time

    def _follow_now(self) -> None:
        now = self.feeder.get_clock().now().nanoseconds * 1e-9
        with self._lock:
            self._state_time = now
            for index, start, times, positions in self._following.values():
                if now < times[0]:
                    continue  # the clock jumped back: the arm stays where it is
                points = np.vstack((start[None, :], positions))
                for column, joint in enumerate(index):
                    self.state[joint] = np.interp(now, times, points[:, column])

    def _publish_joints(self) -> None:
        # The arm follows its trajectories whether or not its joint states are sent.
        if self.follow:
            self._follow_now()
        if not self.joint_states_on:
            return
        now = self.feeder.get_clock().now()
        if self.joint_sample_period is None:
            self._publish_sample(now.to_msg())
            return
        t = now.nanoseconds * 1e-9
        if self._next_sample is None or self._next_sample < t - 0.2:
            self._next_sample = t  # the first sample, or a stall beyond catching up
        while self._next_sample <= t:
            stamp = Time(nanoseconds=int(self._next_sample * 1e9), clock_type=now.clock_type)
            self._publish_sample(stamp.to_msg())
            self._next_sample += self.joint_sample_period

    def _publish_sample(self, stamp: Any) -> None:
        shown = self.state
        if self.joint_glitch is not None:
            shown = shown + self.joint_glitch(self._joint_samples)
        self._joint_samples += 1
        msg = JointState(name=self.joints, position=[float(v) for v in shown])
        msg.header.stamp = stamp
        self._joint_pub.publish(msg)

    def _call(self, service_type: Any, name: str, request: Any) -> Any:
        """Call the node's service ``~/name`` from the feeder; its response."""
        client = self.feeder.create_client(service_type, f"/{self.node_name}/{name}")
        try:
            assert client.wait_for_service(timeout_sec=scaled(10.0)), name
            future = client.call_async(request)
            return wait_until(lambda: future.done() and future.result(), timeout=15)
        finally:
            self.feeder.destroy_client(client)

    def change_state(self, transition: str) -> bool:
        """Ask the node's real ``~/change_state`` service (lifecycle_msgs/srv/ChangeState)
        for ``transition`` by label (``configure``, ``activate``, ...); whether it
        succeeded."""
        request = ChangeState.Request()
        request.transition.label = transition
        return bool(self._call(ChangeState, "change_state", request).success)

    def get_state(self) -> str:
        """The node's lifecycle state through its real ``~/get_state`` service."""
        return str(self._call(GetState, "get_state", GetState.Request()).current_state.label)

    def publish_prompt(self, text: str) -> None:
        self._prompt_pub.publish(String(data=text))

    def snapshot(self) -> Received:
        with self._lock:
            return Received(
                list(self.received.arm),
                list(self.received.gripper),
                list(self.received.preview),
                list(self.received.diagnostics),
                dict(self.received.arrivals),
            )

    def statuses(self) -> list[dict[str, Any]]:
        """Every /diagnostics status of this node so far, as dicts (see last_status)."""
        with self._lock:
            arrays = list(self.received.diagnostics)
        out = []
        for msg in arrays:
            for status in msg.status:
                if status.name.startswith(self.status_prefix):
                    values: dict[str, Any] = {kv.key: kv.value for kv in status.values}
                    values["message"] = status.message
                    values["level"] = int.from_bytes(status.level, "little")
                    out.append(values)
        return out

    def last_status(self) -> dict[str, Any] | None:
        """The newest /diagnostics status of this node as a dict of its values plus
        'message' and 'level' (0 OK, 1 WARN, 2 ERROR)."""
        statuses = self.statuses()
        return statuses[-1] if statuses else None

    def __enter__(self) -> Rig:
        self._thread = self._spinning.__enter__()[0]  # the executor's (priority tests)
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._spinning.__exit__(None, None, None)
        self.node.destroy_node()
        self.feeder.destroy_node()
