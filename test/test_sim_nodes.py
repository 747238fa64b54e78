"""sim_arm and sim_cameras over real rclpy (Fast DDS on loopback)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import cv2
import numpy as np
import pytest

pytest.importorskip("rclpy")

from builtin_interfaces.msg import Duration  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import CompressedImage, Image, JointState  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

from relay_ros.pipeline.trajectory import format_t_obs  # noqa: E402
from relay_ros.sim.arm_node import SimArmConfigError, SimArmNode  # noqa: E402
from relay_ros.sim.cameras_node import SimCamerasConfigError, SimCamerasNode  # noqa: E402
from relay_ros.sim.world_camera import World, WorldCamera  # noqa: E402

pytestmark = pytest.mark.ros


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def spin_until(executor: SingleThreadedExecutor, done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        executor.spin_once(timeout_sec=0.02)
    return done()


@pytest.fixture
def executor(ros_context) -> Iterator[SingleThreadedExecutor]:
    executor = SingleThreadedExecutor(context=ros_context)
    try:
        yield executor
    finally:
        executor.shutdown()


def duration(seconds: float) -> Duration:
    sec = int(seconds)
    return Duration(sec=sec, nanosec=round((seconds - sec) * 1e9))


def trajectory(
    joints: list[str], times: list[float], positions: list[list[float]]
) -> JointTrajectory:
    msg = JointTrajectory()
    msg.joint_names = joints
    for t, p in zip(times, positions):
        msg.points.append(JointTrajectoryPoint(positions=p, time_from_start=duration(t)))
    return msg


def arm_overrides(name: str) -> dict:
    return {
        "controller_names": ["arm", "gripper"],
        "controllers.arm.joints": ["a1", "a2"],
        "controllers.arm.topic": f"/{name}/arm/joint_trajectory",
        "controllers.arm.initial_positions": [0.0, 0.5],
        "controllers.gripper.joints": ["g"],
        "controllers.gripper.topic": f"/{name}/gripper/joint_trajectory",
        "joint_states_topic": f"/{name}/joint_states",
        "metrics_rate_hz": 10.0,
        "robot_description_topic": f"/{name}/robot_description",
    }


def test_sim_arm_follows_a_trajectory_on_joint_states(ros_context, executor) -> None:
    name = unique("arm")
    arm = SimArmNode(node_name=name, context=ros_context, parameter_overrides=arm_overrides(name))
    probe = Node(unique("probe"), context=ros_context)
    states: list[JointState] = []
    metrics: list[DiagnosticArray] = []
    try:
        probe.create_subscription(JointState, f"/{name}/joint_states", states.append, 10)
        probe.create_subscription(DiagnosticArray, f"/{name}/metrics", metrics.append, 10)
        arm_pub = probe.create_publisher(JointTrajectory, f"/{name}/arm/joint_trajectory", 10)
        executor.add_node(arm)
        executor.add_node(probe)
        assert spin_until(executor, lambda: arm_pub.get_subscription_count() > 0 and states, 10)
        first = states[-1]
        assert list(first.name) == ["a1", "a2", "g"]
        np.testing.assert_allclose(first.position, [0.0, 0.5, 0.0])

        msg = trajectory(["a2", "a1"], [0.1, 0.3], [[0.6, 0.2], [0.8, 0.4]])
        msg.header.frame_id = format_t_obs(arm.get_clock().now().nanoseconds * 1e-9 - 0.05)
        arm_pub.publish(msg)

        def reached() -> bool:
            return bool(states) and np.allclose(states[-1].position, [0.4, 0.8, 0.0])

        assert spin_until(executor, reached, 10)
        # In between, /joint_states moved through intermediate positions at ~100 Hz.
        a1 = [s.position[0] for s in states]
        assert any(0.0 < v < 0.4 for v in a1)
        stamps = [s.header.stamp.sec + s.header.stamp.nanosec * 1e-9 for s in states]
        assert all(b > a for a, b in zip(stamps, stamps[1:]))

        arm_metrics = arm.metrics()["arm"]
        assert (arm_metrics.accepted, arm_metrics.rejected) == (1, 0)
        assert arm_metrics.action_age_samples > 0
        assert arm_metrics.action_age_max_s >= 0.05
        assert arm.followers["gripper"].measures.metrics().accepted == 0

        assert spin_until(executor, lambda: bool(metrics), 10)
        (status,) = [s for s in metrics[-1].status if s.name == f"{name}: arm"]
        values = {kv.key: kv.value for kv in status.values}
        assert values["accepted"] == "1"
        assert values["rejection_reasons"] == "{}"
    finally:
        executor.remove_node(arm)
        executor.remove_node(probe)
        arm.destroy_node()
        probe.destroy_node()


def test_sim_arm_rejects_and_reports_a_bad_trajectory(ros_context, executor) -> None:
    name = unique("arm")
    arm = SimArmNode(node_name=name, context=ros_context, parameter_overrides=arm_overrides(name))
    probe = Node(unique("probe"), context=ros_context)
    metrics: list[DiagnosticArray] = []
    try:
        probe.create_subscription(DiagnosticArray, f"/{name}/metrics", metrics.append, 10)
        pub = probe.create_publisher(JointTrajectory, f"/{name}/gripper/joint_trajectory", 10)
        executor.add_node(arm)
        executor.add_node(probe)
        assert spin_until(executor, lambda: pub.get_subscription_count() > 0, 10)
        pub.publish(trajectory(["g"], [0.2, 0.1], [[0.01], [0.02]]))
        follower = arm.followers["gripper"]
        assert spin_until(executor, lambda: follower.measures.metrics().rejected == 1, 10)
        assert follower.measures.metrics().last_rejection == (
            "controller 'gripper': time_from_start is not strictly increasing: point 1 at "
            "0.100000 s follows point 0 at 0.200000 s"
        )

        def reported() -> bool:
            return any(
                s.name == f"{name}: gripper" and s.level == b"\x01"
                for m in metrics
                for s in m.status
            )

        assert spin_until(executor, reported, 10)
    finally:
        executor.remove_node(arm)
        executor.remove_node(probe)
        arm.destroy_node()
        probe.destroy_node()


def test_sim_arm_configuration_errors(ros_context) -> None:
    with pytest.raises(SimArmConfigError) as info:
        SimArmNode(
            node_name=unique("arm"),
            context=ros_context,
            parameter_overrides={"controller_names": ["left"]},
        )
    assert str(info.value) == (
        "parameter 'controllers.left.joints' is not set; expected the joint names of "
        "controller 'left'"
    )
    with pytest.raises(SimArmConfigError) as info:
        SimArmNode(
            node_name=unique("arm"),
            context=ros_context,
            parameter_overrides={
                "controller_names": ["a", "b"],
                "controllers.a.joints": ["j"],
                "controllers.b.joints": ["j"],
            },
        )
    assert str(info.value) == (
        "joint 'j' is in controllers 'a' and 'b'; expected each joint in one controller"
    )
    with pytest.raises(SimArmConfigError) as info:
        SimArmNode(
            node_name=unique("arm"),
            context=ros_context,
            parameter_overrides={
                "controller_names": ["a"],
                "controllers.a.joints": ["j", "k"],
                "controllers.a.initial_positions": [1.0],
            },
        )
    assert str(info.value) == (
        "parameter 'controllers.a.initial_positions' has 1 values for 2 joints ['j', 'k']; "
        "expected 2"
    )


@pytest.mark.parametrize("model", ["pi05", "pi0", "groot"])
def test_sim_arm_publishes_its_urdf_with_the_limits_of_the_shipped_configs(
    ros_context, executor, model
) -> None:
    """robot_description, transient-local: a subscriber that comes later still gets it,
    and its limits are the ones config/<model>.yaml gives (the configs are true)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    from relay_ros.demo.models import load_model_config
    from relay_ros.pipeline.joint_limits import resolve_joint_limits
    from relay_ros.pipeline.urdf_limits import parse_urdf

    name = unique("arm")
    arm = SimArmNode(node_name=name, context=ros_context, parameter_overrides=arm_overrides(name))
    listener = Node(unique("listener"), context=ros_context)
    got: list[str] = []
    latched = QoSProfile(
        depth=1,
        history=HistoryPolicy.KEEP_LAST,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL,
    )
    listener.create_subscription(
        String, f"/{name}/robot_description", lambda m: got.append(m.data), latched
    )
    executor.add_node(arm)
    executor.add_node(listener)
    try:
        assert spin_until(executor, lambda: got, 10.0)
    finally:
        listener.destroy_node()
        arm.destroy_node()
    robot = parse_urdf(got[0], "robot_description")
    config = load_model_config(model)
    from_urdf = resolve_joint_limits(config.commanded_joints, {}, robot)
    for joint, limit in config.joint_limits.items():
        urdf = from_urdf[joint]
        assert (limit.min_position, limit.max_position, limit.max_velocity) == (
            urdf.min_position,
            urdf.max_position,
            urdf.max_velocity,
        ), joint


@pytest.mark.parametrize(
    "make, error, old, new",
    [
        (SimArmNode, SimArmConfigError, "controllers", "controller_names"),
        (SimCamerasNode, SimCamerasConfigError, "cameras", "camera_names"),
    ],
)
def test_sim_list_names_of_earlier_releases_are_refused(ros_context, make, error, old, new):
    """``controllers: [...]`` / ``cameras: [...]`` beside their ``<old>.<name>.*`` namespace
    broke ``ros2 param dump``; a file that still uses them is refused, naming the new one."""
    with pytest.raises(error) as info:
        make(node_name=unique("old"), context=ros_context, parameter_overrides={old: ["a"]})
    assert str(info.value) == (
        f"parameter '{old}' is now '{new}' (a list named like the {old}.<name>.* namespace "
        f"breaks 'ros2 param dump'): write {new}: ['a']"
    )


def test_sim_arm_defaults(ros_context) -> None:
    arm = SimArmNode(node_name=unique("arm"), context=ros_context)
    try:
        assert dict(arm.topics) == {
            "arm_controller": "/arm_controller/joint_trajectory",
            "gripper_controller": "/gripper_controller/joint_trajectory",
        }
        assert arm.joint_names == [f"joint{i}" for i in range(1, 8)] + ["gripper_joint"]
        descriptor = arm.describe_parameter("joint_states_rate_hz")
        assert "Hz" in descriptor.description
        assert arm.get_parameter("joint_states_rate_hz").value == 100.0
        # A position-controlled arm trails its command; controllers set as docs/node.md says.
        for follower in arm.followers.values():
            assert follower.tracking_time_constant_s == 0.04
            assert follower.interpolate_from_desired_state
            assert not follower.allow_trajectory_replacement
    finally:
        arm.destroy_node()


def test_sim_arm_controllers_run_as_the_user_sets_them(ros_context) -> None:
    name = unique("arm")
    overrides = {
        **arm_overrides(name),
        "tracking_time_constant_s": 0.0,
        "controllers.arm.interpolate_from_desired_state": False,
        "controllers.gripper.allow_trajectory_replacement": True,
    }
    arm = SimArmNode(node_name=name, context=ros_context, parameter_overrides=overrides)
    try:
        followers = arm.followers
        assert followers["arm"].tracking_time_constant_s == 0.0
        assert not followers["arm"].interpolate_from_desired_state
        assert not followers["arm"].allow_trajectory_replacement
        assert followers["gripper"].interpolate_from_desired_state
        assert followers["gripper"].allow_trajectory_replacement
    finally:
        arm.destroy_node()


def test_sim_cameras_publish_raw_and_compressed_frames(ros_context, executor) -> None:
    name = unique("cams")
    cameras = SimCamerasNode(
        node_name=name,
        context=ros_context,
        parameter_overrides={
            "scene": "shapes",
            "camera_names": ["front", "wrist"],
            "cameras.front.topic": f"/{name}/front/image_raw",
            "cameras.front.width": 64,
            "cameras.front.height": 48,
            "cameras.front.rate_hz": 30.0,
            "cameras.wrist.topic": f"/{name}/wrist/image_raw/compressed",
            "cameras.wrist.format": "compressed",
            "cameras.wrist.width": 80,
            "cameras.wrist.height": 60,
            "cameras.wrist.rate_hz": 30.0,
        },
    )
    probe = Node(unique("probe"), context=ros_context)
    raw: list[Image] = []
    compressed: list[CompressedImage] = []
    try:
        probe.create_subscription(
            Image, f"/{name}/front/image_raw", raw.append, qos_profile_sensor_data
        )
        probe.create_subscription(
            CompressedImage,
            f"/{name}/wrist/image_raw/compressed",
            compressed.append,
            qos_profile_sensor_data,
        )
        executor.add_node(cameras)
        executor.add_node(probe)
        assert spin_until(executor, lambda: len(raw) >= 2 and len(compressed) >= 2, 10)

        image = raw[-1]
        assert (image.height, image.width, image.encoding, image.step) == (48, 64, "rgb8", 192)
        assert image.header.frame_id == "front_camera_optical_frame"
        frames = [np.frombuffer(bytes(m.data), np.uint8).reshape(48, 64, 3) for m in raw[-2:]]
        assert not np.array_equal(frames[0], frames[1])

        jpeg = compressed[-1]
        assert jpeg.format == "jpeg"
        decoded = cv2.imdecode(np.frombuffer(bytes(jpeg.data), np.uint8), cv2.IMREAD_COLOR)
        assert decoded.shape == (60, 80, 3)
        stamp = jpeg.header.stamp.sec + jpeg.header.stamp.nanosec * 1e-9
        assert abs(stamp - cameras.get_clock().now().nanoseconds * 1e-9) < 5.0
    finally:
        executor.remove_node(cameras)
        executor.remove_node(probe)
        cameras.destroy_node()
        probe.destroy_node()


def test_sim_cameras_draw_the_world_from_the_joint_states(ros_context, executor) -> None:
    """The base view follows the arm's joint states; swap_red_blue reverses the channels."""
    name = unique("cams")
    joints_topic = f"/{name}/joint_states"
    cameras = SimCamerasNode(
        node_name=name,
        context=ros_context,
        parameter_overrides={
            "camera_names": ["base"],
            "cameras.base.topic": f"/{name}/base/image_raw",
            "cameras.base.width": 96,
            "cameras.base.height": 96,
            "cameras.base.rate_hz": 50.0,
            "joint_states_topic": joints_topic,
            "arm_joints": ["a1", "a2"],
            "seed": 5,
            "swap_red_blue": True,
        },
    )
    assert cameras.cameras["base"].role == "base"
    probe = Node(unique("probe"), context=ros_context)
    frames: list[Image] = []
    try:
        probe.create_subscription(
            Image, f"/{name}/base/image_raw", frames.append, qos_profile_sensor_data
        )
        states = probe.create_publisher(JointState, joints_topic, 10)
        executor.add_node(cameras)
        executor.add_node(probe)
        pose = (0.6, -0.4)

        def drawn_at_pose() -> bool:
            states.publish(JointState(name=["x", "a2", "a1"], position=[9.0, pose[1], pose[0]]))
            if not frames:
                return False
            msg = frames[-1]
            t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            got = np.frombuffer(bytes(msg.data), np.uint8).reshape(96, 96, 3)
            expected = WorldCamera("base", 96, 96, World(seed=5)).render(t, *pose)
            return np.array_equal(got, expected[..., ::-1])

        assert spin_until(executor, drawn_at_pose, 10)
    finally:
        executor.remove_node(cameras)
        executor.remove_node(probe)
        cameras.destroy_node()
        probe.destroy_node()


def test_sim_cameras_configuration_errors(ros_context) -> None:
    with pytest.raises(SimCamerasConfigError) as info:
        SimCamerasNode(
            node_name=unique("cams"),
            context=ros_context,
            parameter_overrides={"camera_names": ["c"], "cameras.c.format": "png"},
        )
    assert str(info.value) == (
        "parameter 'cameras.c.format' is 'png'; expected one of ['raw', 'compressed']"
    )
    with pytest.raises(SimCamerasConfigError) as info:
        SimCamerasNode(
            node_name=unique("cams"),
            context=ros_context,
            parameter_overrides={"camera_names": ["c"], "cameras.c.width": 4},
        )
    assert str(info.value) == (
        "camera 'c': scene width 4 is not an integer number of pixels in [16, 8192]"
    )
    for overrides, message in [
        (
            {"camera_names": ["c"], "cameras.c.role": "top"},
            "parameter 'cameras.c.role' is 'top'; expected one of ['base', 'wrist']",
        ),
        ({"scene": "mars"}, "parameter 'scene' is 'mars'; expected one of ['world', 'shapes']"),
        ({"arm_joints": ["j1"]}, "parameter 'arm_joints' is ['j1']; expected two joint names"),
    ]:
        with pytest.raises(SimCamerasConfigError) as info:
            SimCamerasNode(
                node_name=unique("cams"), context=ros_context, parameter_overrides=overrides
            )
        assert str(info.value) == message


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "params"),
    [
        ("relay_ros.sim.arm_node", ["joint_states_topic:=joint_states"]),
        ("relay_ros.sim.cameras_node", ["camera_names:=[c]", "cameras.c.topic:=image_raw"]),
    ],
)
def test_node_main_stops_cleanly_on_ctrl_c(module: str, params: list[str]) -> None:
    name = unique("main")
    # Relative topics keep this process's traffic inside its own namespace.
    args = ["--ros-args", "-r", f"__node:={name}", "-r", f"__ns:=/{name}"]
    for param in params:
        args += ["-p", param]
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(os.environ),
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        lines = []
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            lines.append(line)
            if "Hz" in line:  # the start-up log line names the rates
                break
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0, "".join(lines) + process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
