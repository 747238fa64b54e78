"""policy_node's debug topics: each observation as the model receives it.

So a team can check camera wiring and colour order on the live robot (the same
check ``relay-ros replay --save-observations`` gives offline), the node
publishes, for every observation it sends:

- ``~/observation/<camera key>``: ``sensor_msgs/Image``, ``rgb8``, the frame
  after the node's resize and zero padding to the model's ``image_size``
  (``rqt_image_view`` shows it in true colours). Characters a ROS name cannot
  hold become ``_``: GR00T's ``video.ego_view`` is ``~/observation/video_ego_view``.
- ``~/observation/state``: ``sensor_msgs/JointState`` with ``state_joints`` as
  names and the state values sent (π0's vector without its zero padding;
  GR00T's groups joined in order, which is ``state_joints`` order).

Both are stamped with the observation time (``header.stamp``; ``frame_id``
``t_obs=<s>`` like the chunks) and are published only while someone subscribes:
a robot nobody debugs pays one subscription count per request.

The observation is read by its wire format (``WireFormat.observed``,
:mod:`relay_ros.formats`: π0 ``images``, GR00T ``video``, a layout's key paths,
channel-first frames turned back); the conversion (:func:`image_fields`,
:func:`debug_topic_name`) is plain Python; :class:`ObservationTopics` creates
the publishers on the node and imports rclpy message types when constructed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay_ros.formats import WireFormat
from relay_ros.pipeline.trajectory import format_t_obs, seconds_to_sec_nanosec

__all__ = [
    "ImageFields",
    "ObservationTopics",
    "debug_topic_name",
    "frame_to_rgb",
    "image_fields",
]

_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_]")


def debug_topic_name(camera_key: str) -> str:
    """``~/observation/<key>`` with characters a ROS name cannot hold replaced by ``_``."""
    return f"~/observation/{_NOT_IN_NAME.sub('_', camera_key)}"


@dataclass(frozen=True)
class ImageFields:
    """The fields of one ``sensor_msgs/Image`` (``rgb8``, rows unpadded)."""

    height: int
    width: int
    encoding: str
    step: int
    data: bytes


def frame_to_rgb(frame: Any) -> np.ndarray:
    """An observation frame as an (H, W, 3) RGB uint8 array.

    Accepted: (H, W, 3) or GR00T's (1, H, W, 3) uint8, floats in [0, 1], or
    JPEG bytes (decoded, as the server decodes them).

    Raises:
        ValueError: another shape, or bytes that are not a JPEG image.
    """
    if isinstance(frame, (bytes, bytearray, memoryview)):
        import cv2

        decoded = cv2.imdecode(np.frombuffer(bytes(frame), np.uint8), cv2.IMREAD_COLOR)
        if decoded is None:
            raise ValueError(f"{len(frame)} bytes that do not decode as JPEG")
        return cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)
    array = np.asarray(frame)
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 3 or array.shape[2] != 3:
        raise ValueError(f"frame of shape {array.shape}; expected (H, W, 3)")
    if array.dtype != np.uint8:
        array = np.clip(np.rint(array.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)
    return array


def image_fields(frame: Any) -> ImageFields:
    """An observation frame (see :func:`frame_to_rgb`) as ``rgb8`` Image fields."""
    array = frame_to_rgb(frame)
    height, width = int(array.shape[0]), int(array.shape[1])
    return ImageFields(height, width, "rgb8", 3 * width, np.ascontiguousarray(array).tobytes())


class ObservationTopics:
    """The debug publishers of one node; :meth:`publish` sends an observation to them.

    Args:
        node: The rclpy node (topics are private: ``~/observation/...``).
        camera_keys: The model's camera keys the observations carry.
        state_joints: Names of the state vector's entries.
        wire_format: The observations' wire format (:mod:`relay_ros.formats`), which
            reads their frames and state.
        callback_group: The publishers' group (the node passes its
            :class:`~relay_ros.node.polled.PolledCallbackGroup`: no executor
            watches their QoS events).
    """

    def __init__(
        self,
        node: Any,
        camera_keys: Sequence[str],
        state_joints: Sequence[str],
        *,
        wire_format: WireFormat,
        callback_group: Any = None,
    ) -> None:
        from sensor_msgs.msg import Image, JointState

        self._format = wire_format
        self._image_type = Image
        self._state_type = JointState
        self._joints = list(state_joints)
        self._images = {
            key: node.create_publisher(
                Image, debug_topic_name(key), 1, callback_group=callback_group
            )
            for key in camera_keys
        }
        self._state = node.create_publisher(
            JointState, "~/observation/state", 10, callback_group=callback_group
        )

    def publish(self, observation: Mapping[str, Any], t_obs: float) -> None:
        """Publish ``observation`` (as sent, taken at ``t_obs`` on the node clock, s)
        on the topics someone subscribes to."""
        watched = [key for key, pub in self._images.items() if pub.get_subscription_count() > 0]
        state_watched = self._state.get_subscription_count() > 0
        if not watched and not state_watched:
            return
        sec, nanosec = seconds_to_sec_nanosec(max(t_obs, 0.0))
        tag = format_t_obs(t_obs)
        frames, state = self._format.observed(observation)
        if state_watched:
            msg = self._state_type()
            msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
            msg.header.frame_id = tag
            msg.name = self._joints
            msg.position = state[: len(self._joints)]  # π0's zero padding dropped
            self._state.publish(msg)
        for key in watched:
            publisher = self._images[key]
            if key not in frames:
                continue
            fields = image_fields(frames[key])
            msg = self._image_type()
            msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
            msg.header.frame_id = tag
            msg.height, msg.width = fields.height, fields.width
            msg.encoding, msg.step = fields.encoding, fields.step
            msg.is_bigendian = 0
            msg.data = fields.data
            publisher.publish(msg)

    def destroy(self, node: Any) -> None:
        """Remove the publishers from ``node``."""
        for publisher in [*self._images.values(), self._state]:
            node.destroy_publisher(publisher)
