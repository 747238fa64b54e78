"""What a recording of one node configuration holds, once the server is known.

The dataset must match inference exactly: the cameras under the camera map's keys,
the state in the order the model gets it, the action in the model's action order,
images as the model is sent them. :func:`plan_recording` derives all of it from the
node's settings and the server's :class:`~relay_ros.pipeline.server_spec.ServerSpec`
(its ``image_size``, and for GR00T the action groups that place each output's dims),
for policy_node's live recording and ``relay-ros export`` alike:

- ``observation.state``: the ``state_joints``, unpadded (a π0 checkpoint pads it to
  its ``action_dim`` itself when training, as at inference);
- ``action``: the action vector's dimensions 0 .. (highest dimension an output
  drives), each named after the joint it drives; a dimension no output drives is
  ``unused_<d>`` and recorded as 0;
- each camera of the map at the server's ``image_size``.

Plain Python: the settings are read through :class:`RecordingSettings`, which
policy_node's ``NodeConfig`` satisfies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from relay_ros.pipeline.camera_map import CameraEntry
from relay_ros.pipeline.outputs import load_outputs
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.recording.frames import FrameAssembler
from relay_ros.recording.lerobot_format import DatasetLayout
from relay_ros.recording.recorder import FrameConverter
from relay_ros.recording.video import VideoSettings, video_info

__all__ = ["RecordingPlan", "RecordingSettings", "plan_recording"]


class OutputSettings(Protocol):
    """One output controller as configured (``NodeConfig.outputs`` items)."""

    @property
    def name(self) -> str: ...
    def as_mapping(self) -> dict[str, Any]: ...


class RecordingSettings(Protocol):
    """The node settings a recording reads."""

    @property
    def state_joints(self) -> tuple[str, ...]: ...
    @property
    def outputs(self) -> Sequence[OutputSettings]: ...
    @property
    def commanded_joints(self) -> tuple[str, ...]: ...
    @property
    def sensor_timeout_s(self) -> float: ...
    @property
    def image_encoding(self) -> str: ...
    @property
    def jpeg_quality(self) -> int: ...
    @property
    def record_dir(self) -> Path | None: ...
    @property
    def record_fps(self) -> int: ...
    @property
    def record_video_codec(self) -> str: ...
    @property
    def record_queue_frames(self) -> int: ...
    @property
    def record_robot_type(self) -> str: ...


@dataclass(frozen=True)
class RecordingPlan:
    """The layout of the dataset and how its frames are taken and converted.

    Attributes:
        layout: What every frame holds.
        cameras: The camera map's entries (topic and transport of each key).
        action_joints: Per action dimension, the joint it drives (None: none).
        command_joints: The order of the commanded positions (``commanded_joints``).
        max_age_s: The oldest an input may be in a frame (``sensor_timeout_s``).
        encoding: The node's ``image_encoding`` (a JPEG frame is recorded decoded).
        jpeg_quality: The node's ``jpeg_quality``.
        video: The video encoder settings.
    """

    layout: DatasetLayout
    cameras: tuple[CameraEntry, ...]
    action_joints: tuple[str | None, ...]
    command_joints: tuple[str, ...]
    max_age_s: float
    encoding: str
    jpeg_quality: int
    video: VideoSettings

    def assembler(self) -> FrameAssembler:
        """A :class:`FrameAssembler` for this plan's frames."""
        return FrameAssembler(
            [c.key for c in self.cameras],
            self.layout.state_names,
            self.action_joints,
            self.command_joints,
            self.max_age_s,
        )

    def converter(self, deserialize: Callable[[bytes], Any] | None = None) -> FrameConverter:
        """A :class:`FrameConverter` giving the images the model is sent."""
        return FrameConverter(
            self.cameras,
            self.layout.image_size,
            encoding=self.encoding,
            jpeg_quality=self.jpeg_quality,
            deserialize=deserialize,
        )


def plan_recording(
    settings: RecordingSettings, cameras: Sequence[CameraEntry], spec: ServerSpec
) -> RecordingPlan:
    """The recording of ``settings``' node talking to the server ``spec`` describes.

    Raises:
        OutputsError: the outputs do not fit the server (as the node refuses them).
        VideoCodecError: an unknown codec.
    """
    outputs = load_outputs({o.name: o.as_mapping() for o in settings.outputs}, spec)
    width = 1 + max(d for output in outputs for d in output.dims)
    action_joints: list[str | None] = [None] * width
    for output in outputs:
        for joint, dim in zip(output.joints, output.dims):
            action_joints[dim] = joint
    video = VideoSettings(vcodec=settings.record_video_codec)
    fps = int(settings.record_fps)
    layout = DatasetLayout(
        fps=fps,
        cameras=tuple(c.key for c in cameras),
        image_size=spec.image_size,
        state_names=tuple(settings.state_joints),
        action_names=tuple(
            j if j is not None else f"unused_{d}" for d, j in enumerate(action_joints)
        ),
        robot_type=settings.record_robot_type or None,
        video_info=video_info(video, spec.image_size, fps),
    )
    return RecordingPlan(
        layout=layout,
        cameras=tuple(cameras),
        action_joints=tuple(action_joints),
        command_joints=tuple(settings.commanded_joints),
        max_age_s=float(settings.sensor_timeout_s),
        encoding=settings.image_encoding,
        jpeg_quality=int(settings.jpeg_quality),
        video=video,
    )
