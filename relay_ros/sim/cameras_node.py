"""``sim_cameras``: simulated cameras publishing the world (or a moving scene) as ROS images.

With ``scene: world`` (default) each camera draws the simulated world of
`relay_ros.world` from the arm's state (`relay_ros.sim.world_camera.WorldCamera`):
the node subscribes to the joint states, places the arm by its first two joints
(``arm_joints``) and renders the base or wrist view with the target where its
seeded schedule puts it at the frame's time. With ``scene: shapes`` it renders
`relay_ros.sim.scene.SceneRenderer`'s moving shapes instead (no joint states needed).

Each camera publishes at its own rate as ``sensor_msgs/Image`` (``rgb8``) or
``sensor_msgs/CompressedImage`` (``jpeg``), stamped with the node clock (so
``use_sim_time`` works: the frame is a function of that time) and with the
sensor-data QoS (best effort, keep last 5) that real camera drivers use.
``swap_red_blue`` plays a driver that sends BGR pixels labelled ``rgb8``.

Parameters (declared in `SimCamerasNode._declare_parameters`; see docs/simulation.md):

- ``camera_names`` (string[]): camera names, default ``["base", "wrist"]`` (not
  ``cameras``: a list named like the ``cameras.<name>.*`` namespace breaks
  ``ros2 param dump``).
- ``cameras.<name>.topic`` (string): default ``camera/<name>/image_raw``, with
  ``/compressed`` appended for the compressed format.
- ``cameras.<name>.format`` (string): ``raw`` (default) or ``compressed``.
- ``cameras.<name>.width`` / ``.height`` (int): default 640 x 480 pixels.
- ``cameras.<name>.rate_hz`` (double): default 15 Hz.
- ``cameras.<name>.frame_id`` (string): default ``<name>_camera_optical_frame``.
- ``cameras.<name>.role`` (string): ``base`` or ``wrist`` (world scene); default
  ``wrist`` when the name contains "wrist", else ``base``.
- ``seed`` (int, 0), ``jpeg_quality`` (int, 90).
- ``scene`` (string): ``world`` (default) or ``shapes``.
- ``joint_states_topic`` (string, ``joint_states``), ``arm_joints`` (string[],
  ``["joint1", "joint2"]``): where the arm's state comes from (world scene).
- ``swap_red_blue`` (bool, false): publish the channels in the wrong order.
"""

from __future__ import annotations

import array
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.context import Context
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image, JointState

from relay_ros.node.node_main import (
    NodeProgram,
    UsageRow,
    default_row,
    format_usage,
    run_node,
    typed_row,
)
from relay_ros.sim._parameters import (
    as_parameters,
    declare_if_given,
    parameter_types,
    refuse_renamed,
)
from relay_ros.sim.scene import SceneError, SceneRenderer, encode_jpeg
from relay_ros.sim.world_camera import CAMERA_ROLES, World, WorldCamera
from relay_ros.stop_signals import take_stop_signals
from relay_ros.world import ALIGNED_START_S

__all__ = ["CameraSettings", "SimCamerasConfigError", "SimCamerasNode", "main"]

FORMATS = ("raw", "compressed")
SCENES = ("world", "shapes")

# Node-wide parameters: name -> (default, description).
_NODE_PARAMETERS: dict[str, tuple[Any, str]] = {
    "camera_names": (
        ["base", "wrist"],
        "Names of the simulated cameras; each has cameras.<name>.* parameters.",
    ),
    "seed": (0, "Scene seed; with the camera name it fixes colours and motion."),
    "jpeg_quality": (90, "JPEG quality 1..100 for compressed cameras."),
    "scene": (
        "world",
        "world: the simulated arm, target and distractor seen by base and wrist cameras; "
        "shapes: moving shapes that ignore the arm.",
    ),
    "joint_states_topic": (
        "joint_states",
        "JointState input placing the arm (world scene); relative: follows the node's namespace.",
    ),
    "arm_joints": (
        ["joint1", "joint2"],
        "The two joints that move the simulated arm's end effector (world scene).",
    ),
    "swap_red_blue": (
        False,
        "Publish blue-green-red pixels labelled rgb8, like a misconfigured camera driver.",
    ),
}

# Per-camera parameters under cameras.<name>.: suffix -> (type, description).
_CAMERA_PARAMETERS: dict[str, tuple[Parameter.Type, str]] = {
    "topic": (
        Parameter.Type.STRING,
        "Output topic; default camera/<name>/image_raw (+ /compressed when compressed), "
        "relative: follows the node's namespace.",
    ),
    "format": (Parameter.Type.STRING, "raw (sensor_msgs/Image rgb8) or compressed (jpeg)."),
    "width": (Parameter.Type.INTEGER, "Frame width in pixels; default 640."),
    "height": (Parameter.Type.INTEGER, "Frame height in pixels; default 480."),
    "rate_hz": (Parameter.Type.DOUBLE, "Publish rate in Hz; default 15."),
    "frame_id": (Parameter.Type.STRING, "header.frame_id; default <name>_camera_optical_frame."),
    "role": (
        Parameter.Type.STRING,
        "base or wrist (world scene); default wrist when the name contains 'wrist', else base.",
    ),
}


class SimCamerasConfigError(ValueError):
    """The sim_cameras parameters are inconsistent."""


@dataclass(frozen=True)
class CameraSettings:
    """One simulated camera.

    Attributes:
        name: Camera name.
        topic: Fully resolved output topic.
        format: ``raw`` or ``compressed``.
        width: Frame width in pixels.
        height: Frame height in pixels.
        rate_hz: Publish rate in Hz.
        frame_id: ``header.frame_id`` of every message.
        role: ``base`` or ``wrist``: which view of the world scene it renders.
    """

    name: str
    topic: str
    format: str
    width: int
    height: int
    rate_hz: float
    frame_id: str
    role: str = "base"


class SimCamerasNode(Node):
    """The ``sim_cameras`` node: one timer, renderer and publisher per camera.

    Args:
        node_name: ROS node name.
        namespace: ROS namespace (None = the default).
        context: rclpy context (None = the global one).
        parameter_overrides: Parameter values, as ``{name: value}`` or a list of
            `rclpy.parameter.Parameter`.
        cli_args: ROS arguments of this node only (e.g. ``--ros-args --params-file F``).

    Raises:
        SimCamerasConfigError: No cameras, an unknown format, a bad size, rate or quality.
    """

    _world_origin: float | None  # declared here: _setup sets it, below the methods using it

    def __init__(
        self,
        *,
        node_name: str = "sim_cameras",
        namespace: str | None = None,
        context: Context | None = None,
        parameter_overrides: Mapping[str, Any] | Sequence[Parameter] | None = None,
        cli_args: Sequence[str] | None = None,
    ) -> None:
        super().__init__(
            node_name,
            namespace=namespace,
            context=context,
            parameter_overrides=as_parameters(parameter_overrides),
            cli_args=None if cli_args is None else list(cli_args),
        )
        try:
            self._setup()
        except Exception:
            # A half-built node would keep its handles until the context shuts down.
            self.destroy_node()
            raise

    @property
    def cameras(self) -> Mapping[str, CameraSettings]:
        """The settings of every camera, by name (read-only mapping)."""
        return MappingProxyType(self._cameras)

    @property
    def world(self) -> World:
        """The simulated world the cameras draw (its seed fixes the target's schedule)."""
        return self._world

    def align_world(self) -> None:
        """Hold the world at `ALIGNED_START_S` until `start_world`: a run aligned to its
        first chunk (the demo) sees the target start moving with the robot."""
        self._world_origin = math.nan

    def start_world(self, t0: float) -> None:
        """After `align_world`: the world's time is ``ALIGNED_START_S + (t - t0)``."""
        self._world_origin = float(t0)

    def world_time(self, t: float) -> float:
        """The world's time at node time ``t`` (s): ``t`` itself unless aligned."""
        origin = self._world_origin
        if origin is None:
            return t
        if math.isnan(origin):
            return ALIGNED_START_S
        return ALIGNED_START_S + max(0.0, t - origin)

    def publish_frame(self, name: str) -> None:
        """Render camera ``name`` at the current node time and publish it."""
        camera = self._cameras[name]
        stamp = self.get_clock().now()
        t = stamp.nanoseconds * 1e-9
        renderer = self._renderers[name]
        if isinstance(renderer, WorldCamera):
            frame = renderer.render(self.world_time(t), *self._arm)
        else:
            frame = renderer.render(t)
        if self._swap_red_blue:
            frame = np.ascontiguousarray(frame[..., ::-1])
        msg: Image | CompressedImage
        if camera.format == "compressed":
            msg = CompressedImage()
            msg.format = "jpeg"
            msg.data = array.array("B", encode_jpeg(frame, self._jpeg_quality))
        else:
            msg = Image()
            msg.height, msg.width = frame.shape[:2]
            msg.encoding = "rgb8"
            msg.is_bigendian = 0
            msg.step = frame.shape[1] * 3
            msg.data = array.array("B", frame.tobytes())
        msg.header.stamp = stamp.to_msg()
        msg.header.frame_id = camera.frame_id
        self._camera_publishers[name].publish(msg)

    # ------------------------------------------------------------------ internals

    def _setup(self) -> None:
        """Declare parameters, then build a renderer, publisher and timer per camera."""
        self._cameras, seed, self._jpeg_quality = self._declare_parameters()
        self._world = World(seed=seed)
        self._world_origin: float | None = None  # None: node time; NaN: held (align_world)
        # (q1, q2) of the arm from the last joint state; the initial pose until one arrives.
        self._arm: tuple[float, float] = (0.0, 0.0)
        self._renderers: dict[str, SceneRenderer | WorldCamera] = {}
        self._camera_publishers: dict[str, Publisher] = {}
        if self._scene == "world":
            self.create_subscription(JointState, self._joint_states_topic, self._on_joint_state, 10)
        for name, camera in self._cameras.items():
            try:
                if self._scene == "world":
                    self._renderers[name] = WorldCamera(
                        camera.role, camera.width, camera.height, self._world
                    )
                else:
                    self._renderers[name] = SceneRenderer(camera.width, camera.height, seed, name)
            except (SceneError, ValueError) as exc:
                raise SimCamerasConfigError(f"camera {name!r}: {exc}") from exc
            message_type = CompressedImage if camera.format == "compressed" else Image
            self._camera_publishers[name] = self.create_publisher(
                message_type, camera.topic, qos_profile_sensor_data
            )
            self.create_timer(1.0 / camera.rate_hz, lambda name=name: self.publish_frame(name))
            view = f" {camera.role} view" if self._scene == "world" else ""
            self.get_logger().info(
                f"camera {name}:{view} {camera.width}x{camera.height} {camera.format} at "
                f"{camera.rate_hz:g} Hz on {camera.topic}"
            )

    def _on_joint_state(self, msg: JointState) -> None:
        """Keep the arm's two joints; a message without both leaves the pose as it was."""
        names = list(msg.name)
        try:
            first, second = (names.index(joint) for joint in self._arm_joints)
            self._arm = (float(msg.position[first]), float(msg.position[second]))
        except (ValueError, IndexError):
            return

    def _declare_parameters(self) -> tuple[dict[str, CameraSettings], int, int]:
        """Declare every parameter (with descriptions) and return the validated values."""
        refuse_renamed(self, "cameras", "camera_names", SimCamerasConfigError)
        values: dict[str, Any] = {}
        for name, (default, description) in _NODE_PARAMETERS.items():
            values[name] = self.declare_parameter(
                name, default, ParameterDescriptor(description=description)
            ).value
        names = [str(n) for n in values["camera_names"]]
        if not names:
            raise SimCamerasConfigError(
                "parameter 'camera_names' is empty; expected at least one name"
            )
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise SimCamerasConfigError(
                f"parameter 'camera_names' lists {duplicates} more than once; expected unique names"
            )
        quality = values["jpeg_quality"]
        if not 1 <= quality <= 100:
            raise SimCamerasConfigError(
                f"parameter 'jpeg_quality' is {quality!r}; expected an integer in [1, 100]"
            )
        self._scene = str(values["scene"])
        if self._scene not in SCENES:
            raise SimCamerasConfigError(
                f"parameter 'scene' is {self._scene!r}; expected one of {list(SCENES)}"
            )
        self._arm_joints = [str(j) for j in values["arm_joints"]]
        if len(self._arm_joints) != 2:
            raise SimCamerasConfigError(
                f"parameter 'arm_joints' is {self._arm_joints}; expected two joint names"
            )
        self._joint_states_topic = str(values["joint_states_topic"])
        self._swap_red_blue = bool(values["swap_red_blue"])

        cameras: dict[str, CameraSettings] = {}
        for camera in names:
            raw: dict[str, Any] = {}
            for suffix, (kind, description) in _CAMERA_PARAMETERS.items():
                full = f"cameras.{camera}.{suffix}"
                raw[suffix] = declare_if_given(self, full, kind, description)
            fmt = raw["format"] or "raw"
            if fmt not in FORMATS:
                raise SimCamerasConfigError(
                    f"parameter 'cameras.{camera}.format' is {fmt!r}; expected one of "
                    f"{list(FORMATS)}"
                )
            rate = 15.0 if raw["rate_hz"] is None else float(raw["rate_hz"])
            if not rate > 0.0:
                raise SimCamerasConfigError(
                    f"parameter 'cameras.{camera}.rate_hz' is {rate!r}; expected > 0 Hz"
                )
            role = raw["role"] or ("wrist" if "wrist" in camera else "base")
            if role not in CAMERA_ROLES:
                raise SimCamerasConfigError(
                    f"parameter 'cameras.{camera}.role' is {role!r}; expected one of "
                    f"{list(CAMERA_ROLES)}"
                )
            default_topic = f"camera/{camera}/image_raw" + (
                "/compressed" if fmt == "compressed" else ""
            )
            cameras[camera] = CameraSettings(
                name=camera,
                topic=self.resolve_topic_name(raw["topic"] or default_topic),
                format=fmt,
                width=640 if raw["width"] is None else int(raw["width"]),
                height=480 if raw["height"] is None else int(raw["height"]),
                rate_hz=rate,
                frame_id=raw["frame_id"] or f"{camera}_camera_optical_frame",
                role=role,
            )
        return cameras, int(values["seed"]), int(quality)


def usage() -> str:
    """``sim_cameras --help``: its topics and every parameter, from the tables above."""
    return format_usage(
        "sim_cameras",
        "Simulated cameras: each publishes what a base or wrist camera sees of the "
        "simulated world (placed by the arm's joint states), or moving shapes, as "
        "sensor_msgs/Image (rgb8) or CompressedImage (jpeg) with the sensor-data QoS.",
        topics=(
            UsageRow(
                "cameras.<name>.topic",
                "out sensor_msgs/Image or CompressedImage",
                "default camera/<name>/image_raw (+ /compressed)",
            ),
            UsageRow(
                "joint_states_topic", "in sensor_msgs/JointState", "places the arm (world scene)"
            ),
        ),
        parameters=[
            *(
                default_row(name, default, text)
                for name, (default, text) in _NODE_PARAMETERS.items()
            ),
            *(
                typed_row(f"cameras.<name>.{suffix}", kind, text)
                for suffix, (kind, text) in _CAMERA_PARAMETERS.items()
            ),
        ],
        docs="docs/simulation.md",
        example="sim_cameras --ros-args -r __ns:=/robot1 -p camera_names:=[base] "
        "-p cameras.base.rate_hz:=30.0",
    )


def main(args: list[str] | None = None) -> int:
    """Console entry point ``sim_cameras``: spin the node until SIGINT or SIGTERM; the exit code."""
    return run_node(
        NodeProgram(
            "sim_cameras",
            SimCamerasNode,
            usage,
            config_errors=(SimCamerasConfigError,),
            parameter_type=parameter_types(_NODE_PARAMETERS, "cameras", _CAMERA_PARAMETERS),
        ),
        args,
    )


if __name__ == "__main__":
    take_stop_signals()
    sys.exit(main())
