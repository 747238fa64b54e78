"""``sim_cameras``: synthetic cameras publishing a moving scene as ROS images.

Each configured camera renders `relay_ros.sim.scene.SceneRenderer` frames at its
own rate and publishes them as ``sensor_msgs/Image`` (``rgb8``) or
``sensor_msgs/CompressedImage`` (``jpeg``), stamped with the node clock (so
``use_sim_time`` works: the frame is a function of that time) and with the
sensor-data QoS (best effort, keep last 5) that real camera drivers use.

Parameters (declared in `SimCamerasNode._declare_parameters`; see docs/simulation.md):

- ``cameras`` (string[]): camera names, default ``["base", "wrist"]``.
- ``cameras.<name>.topic`` (string): default ``/camera/<name>/image_raw``, with
  ``/compressed`` appended for the compressed format.
- ``cameras.<name>.format`` (string): ``raw`` (default) or ``compressed``.
- ``cameras.<name>.width`` / ``.height`` (int): default 640 x 480 pixels.
- ``cameras.<name>.rate_hz`` (double): default 15 Hz.
- ``cameras.<name>.frame_id`` (string): default ``<name>_camera_optical_frame``.
- ``seed`` (int, 0), ``jpeg_quality`` (int, 90).
"""

from __future__ import annotations

import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image

from relay_ros.sim._parameters import as_parameters
from relay_ros.sim.scene import SceneError, SceneRenderer, encode_jpeg

__all__ = ["CameraSettings", "SimCamerasConfigError", "SimCamerasNode", "main"]

FORMATS = ("raw", "compressed")

# Node-wide parameters: name -> (default, description).
_NODE_PARAMETERS: dict[str, tuple[Any, str]] = {
    "cameras": (
        ["base", "wrist"],
        "Names of the simulated cameras; each has cameras.<name>.* parameters.",
    ),
    "seed": (0, "Scene seed; with the camera name it fixes colours and motion."),
    "jpeg_quality": (90, "JPEG quality 1..100 for compressed cameras."),
}

# Per-camera parameters under cameras.<name>.: suffix -> (type, description).
_CAMERA_PARAMETERS: dict[str, tuple[Parameter.Type, str]] = {
    "topic": (
        Parameter.Type.STRING,
        "Output topic; default /camera/<name>/image_raw (+ /compressed when compressed).",
    ),
    "format": (Parameter.Type.STRING, "raw (sensor_msgs/Image rgb8) or compressed (jpeg)."),
    "width": (Parameter.Type.INTEGER, "Frame width in pixels; default 640."),
    "height": (Parameter.Type.INTEGER, "Frame height in pixels; default 480."),
    "rate_hz": (Parameter.Type.DOUBLE, "Publish rate in Hz; default 15."),
    "frame_id": (Parameter.Type.STRING, "header.frame_id; default <name>_camera_optical_frame."),
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
    """

    name: str
    topic: str
    format: str
    width: int
    height: int
    rate_hz: float
    frame_id: str


class SimCamerasNode(Node):
    """The ``sim_cameras`` node: one timer, renderer and publisher per camera.

    Args:
        node_name: ROS node name.
        namespace: ROS namespace (None = the default).
        context: rclpy context (None = the global one).
        parameter_overrides: Parameter values, as ``{name: value}`` or a list of
            `rclpy.parameter.Parameter`.

    Raises:
        SimCamerasConfigError: No cameras, an unknown format, a bad size, rate or quality.
    """

    def __init__(
        self,
        *,
        node_name: str = "sim_cameras",
        namespace: str | None = None,
        context: Context | None = None,
        parameter_overrides: Mapping[str, Any] | Sequence[Parameter] | None = None,
    ) -> None:
        super().__init__(
            node_name,
            namespace=namespace,
            context=context,
            parameter_overrides=as_parameters(parameter_overrides),
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

    def publish_frame(self, name: str) -> None:
        """Render camera ``name`` at the current node time and publish it."""
        camera = self._cameras[name]
        stamp = self.get_clock().now()
        frame = self._renderers[name].render(stamp.nanoseconds * 1e-9)
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
        self._renderers: dict[str, SceneRenderer] = {}
        self._camera_publishers: dict[str, Publisher] = {}
        for name, camera in self._cameras.items():
            try:
                self._renderers[name] = SceneRenderer(camera.width, camera.height, seed, name)
            except SceneError as exc:
                raise SimCamerasConfigError(f"camera {name!r}: {exc}") from exc
            message_type = CompressedImage if camera.format == "compressed" else Image
            self._camera_publishers[name] = self.create_publisher(
                message_type, camera.topic, qos_profile_sensor_data
            )
            self.create_timer(1.0 / camera.rate_hz, lambda name=name: self.publish_frame(name))
            self.get_logger().info(
                f"camera {name}: {camera.width}x{camera.height} {camera.format} at "
                f"{camera.rate_hz:g} Hz on {camera.topic}"
            )

    def _declare_parameters(self) -> tuple[dict[str, CameraSettings], int, int]:
        """Declare every parameter (with descriptions) and return the validated values."""
        values: dict[str, Any] = {}
        for name, (default, description) in _NODE_PARAMETERS.items():
            values[name] = self.declare_parameter(
                name, default, ParameterDescriptor(description=description)
            ).value
        names = [str(n) for n in values["cameras"]]
        if not names:
            raise SimCamerasConfigError("parameter 'cameras' is empty; expected at least one name")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise SimCamerasConfigError(
                f"parameter 'cameras' lists {duplicates} more than once; expected unique names"
            )
        quality = values["jpeg_quality"]
        if not 1 <= quality <= 100:
            raise SimCamerasConfigError(
                f"parameter 'jpeg_quality' is {quality!r}; expected an integer in [1, 100]"
            )

        cameras: dict[str, CameraSettings] = {}
        for camera in names:
            raw: dict[str, Any] = {}
            for suffix, (kind, description) in _CAMERA_PARAMETERS.items():
                full = f"cameras.{camera}.{suffix}"
                descriptor = ParameterDescriptor(description=description)
                raw[suffix] = self.declare_parameter(full, kind, descriptor).value
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
            default_topic = f"/camera/{camera}/image_raw" + (
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
            )
        return cameras, int(values["seed"]), int(quality)


def main(args: list[str] | None = None) -> None:
    """Console entry point ``sim_cameras``: spin the node until Ctrl-C or shutdown."""
    rclpy.init(args=args)
    node: SimCamerasNode | None = None
    try:
        node = SimCamerasNode()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
