"""``relay-ros export``: a rosbag of teleoperated demonstrations into a LeRobot dataset.

The bag goes through the same code as policy_node's live recording, so an exported
dataset and a recorded one match field by field and frame by frame:

- the layout from the node's configuration (params file, camera map, ``-p``) and
  the model's reference metadata (its ``image_size``, or ``--image-size``; GR00T's
  action groups) (:func:`~relay_ros.recording.plan.plan_recording`);
- the bag's messages, in bag-time order, into a
  :class:`~relay_ros.recording.frames.FrameAssembler` with their bag timestamps as
  arrival times (the node uses the middleware's reception times; ``ros2 bag record``
  stamps each message when it receives it);
- a frame every ``1 / record_fps`` s of bag time from the first message on, taken
  once every message up to its time has been fed: each camera's newest frame, the
  joints' newest positions, nothing from later (causal); the action is the
  commanded joints' measured positions and every frame is labelled
  ``intervention`` (a human moved the robot), with the params file's prompt as task;
- the frames into a :class:`~relay_ros.recording.recorder.Recorder` that waits for
  room instead of dropping, committing one episode per bag
  (:class:`~relay_ros.recording.dataset.Dataset`: a new dataset, or appended to one
  of the same layout).

Frames without fresh inputs (before every camera and joint has been seen, or a gap
longer than ``sensor_timeout_s``) are not recorded and are counted in the episode's
``relay_ros/frames_dropped``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay_ros.bag.reader import BagError, BagReader
from relay_ros.bag.replay_inputs import (
    camera_entries,
    given_parameters,
    read_params_file,
    required_topics,
)
from relay_ros.formats import format_for
from relay_ros.formats.embodiment import load_embodiment
from relay_ros.node.node_config import config_from_parameters
from relay_ros.node.param_spec import ParameterError
from relay_ros.node.topic_names import expand_topic_name
from relay_ros.paths import config_dir
from relay_ros.pipeline.camera_map import CameraMapError
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.recording.dataset import Dataset, DatasetError
from relay_ros.recording.episode import EpisodeContext, config_json
from relay_ros.recording.frames import Skip
from relay_ros.recording.plan import plan_recording
from relay_ros.recording.recorder import Recorder
from relay_ros.recording.video import VideoCodecError
from relay_ros.server.metadata import build_metadata

__all__ = ["ExportError", "ExportProgress", "ExportResult", "export"]

_LOG = logging.getLogger(__name__)

# Progress is reported at most this often (s, wall clock).
_PROGRESS_PERIOD_S = 1.0
# Longest the recorder may take to write the episode at the end (s).
_CLOSE_TIMEOUT_S = 600.0


class ExportError(RuntimeError):
    """The export cannot run or failed; the message names the input and the problem."""


@dataclass(frozen=True)
class ExportProgress:
    """How far an export is (for a progress line)."""

    bag_s: float  # bag time exported so far
    duration_s: float  # bag duration
    frames: int  # frames handed to the recorder


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote."""

    dataset: Path
    episode: int
    frames: int
    frames_skipped: int
    episodes_total: int
    skip_reasons: dict[str, int]


def _parameters(
    params_file: Path | None,
    camera_map: Path | None,
    overrides: Mapping[str, Any],
    model: str | None,
) -> tuple[dict[str, Any], Path]:
    if params_file is None:
        params_file = config_dir() / f"{model or 'pi05'}.yaml"
    try:
        file_params = read_params_file(params_file)
    except RuntimeError as exc:  # ReplayError: missing or malformed
        raise ExportError(str(exc)) from None
    given: dict[str, Any] = dict(overrides)
    if model is not None:
        given["model"] = model
    if camera_map is not None:
        if not Path(camera_map).is_file():
            raise ExportError(f"camera map '{camera_map}' does not exist")
        given["camera_map"] = str(camera_map)
    return {**file_params, **given_parameters(params_file, file_params, given)}, params_file


def _server_spec(model: str, layout: str, image_size: tuple[int, int] | None) -> ServerSpec:
    """What the model's reference server announces in ``layout`` (the model's own
    format when empty), ``image_size`` replaced."""
    embodiment = load_embodiment() if format_for(model, layout).needs_embodiment else None
    metadata = build_metadata(model, embodiment=embodiment, layout=layout or None)
    if image_size is not None:
        metadata["image_size"] = [int(image_size[0]), int(image_size[1])]
    return ServerSpec.from_metadata(metadata, model=model, layout=layout)


def export(
    bag: Path,
    output: Path,
    *,
    params_file: Path | None = None,
    camera_map: Path | None = None,
    model: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    image_size: tuple[int, int] | None = None,
    progress: Callable[[ExportProgress], None] | None = None,
    log: logging.Logger | None = None,
) -> ExportResult:
    """Export ``bag`` as one episode of the dataset at ``output`` (module docstring).

    Args:
        bag: The bag (directory, or one .mcap/.db3 file).
        output: The dataset directory (created, or appended to).
        params_file: policy_node's parameters (default: the package's config/<model>.yaml);
            ``record_fps``, ``record_video_codec`` and ``record_robot_type`` apply.
        camera_map: The camera map (default: the params file's).
        model: The model (default: the params file's).
        overrides: Parameters replacing the params file's (``-p``).
        image_size: (height, width) of the stored frames (default: the model's).
        progress: Called at most once a second while messages are read.
        log: Where repairs and the written episode are reported.

    Raises:
        ExportError: a bad input (params, camera map, bag topics and types, an output
            that holds another dataset) or a failure while writing.
    """
    log = log or _LOG
    params, _ = _parameters(params_file, camera_map, overrides or {}, model)
    try:
        config = config_from_parameters(params)
        cameras = camera_entries(config)
        required = required_topics(config)
        spec = _server_spec(config.model, config.layout, image_size)
        plan = plan_recording(config, cameras, spec)
        plan.video.check_available()
    except (ParameterError, CameraMapError, VideoCodecError, ValueError) as exc:
        raise ExportError(str(exc)) from None
    joint_topic = expand_topic_name(config.joint_states_topic)
    camera_of = {expand_topic_name(entry.topic): entry for entry in cameras}
    try:
        reader = BagReader(bag)
    except BagError as exc:
        raise ExportError(str(exc)) from None
    with reader:
        try:
            reader.require_topics(required)
        except BagError as exc:
            raise ExportError(str(exc)) from None
        for topic, msgtype in required.items():
            if reader.topics[topic].msgtype != msgtype:
                raise ExportError(
                    f"bag '{bag}' records topic '{topic}' as {reader.topics[topic].msgtype}; "
                    f"the configuration expects {msgtype}"
                )
        try:
            dataset = Dataset(output, log=log)
        except (DatasetError, OSError) as exc:
            raise ExportError(str(exc)) from None
        parameters = {**params, "record_dir": str(output)}
        recorder = Recorder(
            dataset,
            settings=plan.video,
            log=log,
            block=True,
            queue_frames=config.record_queue_frames,
            context=EpisodeContext(
                source=str(Path(bag).resolve()),
                config_json=config_json(parameters),
                adapter=str(params["lora"]) if params.get("lora") else None,
            ),
        )
        recorder.set_layout(plan.layout, plan.converter())
        assembler = plan.assembler()
        period = 1.0 / plan.layout.fps
        start_ns, duration_s = reader.start_ns, reader.duration_s
        first_t: float | None = None
        next_t = 0.0
        frame_count = 0  # frame times on the grid first_t + k / fps
        last_t = 0.0
        frames = skipped = 0
        reasons: dict[str, int] = {}
        last_report = time.monotonic()

        def emit_until(t_limit: float) -> None:
            """Every frame before ``t_limit``: everything up to its time has been fed."""
            nonlocal next_t, frame_count, frames, skipped
            while next_t < t_limit:
                sample = assembler.sample(
                    next_t, commanded=None, intervention=True, task=config.prompt
                )
                if isinstance(sample, Skip):
                    skipped += 1
                    key = sample.reason.split(" (")[0]
                    reasons[key] = reasons.get(key, 0) + 1
                    recorder.missed()
                elif recorder.offer(sample):
                    frames += 1
                else:
                    break  # the recorder stopped: its error is raised below
                frame_count += 1
                assert first_t is not None
                next_t = first_t + frame_count * period

        try:
            for message in reader.messages(list(required)):
                t = last_t = message.timestamp_ns * 1e-9
                if first_t is None:
                    first_t = next_t = t
                emit_until(t)
                if message.topic == joint_topic:
                    msg = reader.deserialize(message)
                    assembler.joint_state(list(msg.name), list(msg.position), t)
                else:
                    entry = camera_of[message.topic]
                    # Raw images go as CDR bytes (the node's own reader), compressed
                    # ones as messages with format and data.
                    payload = (
                        reader.deserialize(message)
                        if entry.transport == "compressed"
                        else message.data
                    )
                    assembler.frame(entry.key, payload, t)
                if progress is not None and time.monotonic() - last_report >= _PROGRESS_PERIOD_S:
                    last_report = time.monotonic()
                    progress(
                        ExportProgress((message.timestamp_ns - start_ns) * 1e-9, duration_s, frames)
                    )
                if recorder.status().error is not None:
                    break
            if first_t is not None:
                emit_until(math.nextafter(last_t, math.inf))  # a frame at the last message
        except BagError as exc:
            recorder.abort()
            raise ExportError(str(exc)) from None
        except BaseException:  # Ctrl-C: the episode is not complete; nothing is kept
            recorder.abort()
            raise
        if not recorder.close("end of bag", timeout_s=_CLOSE_TIMEOUT_S):
            raise ExportError(f"writing the episode took longer than {_CLOSE_TIMEOUT_S:g} s")
        status = recorder.status()
    if status.error is not None:
        raise ExportError(status.error)
    if frames == 0:
        raise ExportError(
            f"bag '{bag}' gave no frame: {reasons or 'no message on the configured topics'}"
        )
    if progress is not None:
        progress(ExportProgress(duration_s, duration_s, frames))
    return ExportResult(
        dataset=output,
        episode=status.episodes - 1,
        frames=frames,
        frames_skipped=skipped,
        episodes_total=status.episodes,
        skip_reasons=reasons,
    )
