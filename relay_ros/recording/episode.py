"""One episode being recorded: its frames into videos and columns, then its two tables.

An :class:`EpisodeBuffer` takes the frames of one episode as they come
(:meth:`EpisodeBuffer.add`): each camera's image goes straight to that camera's video
encoder (:class:`~relay_ros.recording.video.VideoWriter`) and pixel statistics, the
numbers into columns. Nothing of it is visible in the dataset until
:meth:`EpisodeBuffer.finish` closes the videos and builds the episode's two tables
as LeRobot writes them (:mod:`relay_ros.recording.lerobot_format`):

- the data table: one row per frame, the non-video features in info.json order
  (``timestamp`` = frame_index / fps; ``index`` counts over the whole dataset);
- the episode row of ``meta/episodes``: index, tasks, length, file indices, the
  videos' time ranges, ``stats/<feature>/<stat>`` of every feature, then relay_ros's
  own columns (:data:`~relay_ros.recording.lerobot_format.EXTRA_EPISODE_COLUMNS`).

Its files live in a staging directory until :class:`~relay_ros.recording.dataset.Dataset`
moves them into place. Not thread-safe: the recorder thread owns it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from relay_ros._version import __version__
from relay_ros.recording.lerobot_format import (
    DatasetLayout,
    chunk_and_file,
    feature_dtype_of_column,
    hf_features_json,
)
from relay_ros.recording.stats import PixelStats, feature_stats
from relay_ros.recording.video import VideoSettings, VideoWriter

__all__ = [
    "EpisodeBuffer",
    "EpisodeContext",
    "EpisodeEnd",
    "FinishedEpisode",
    "RecordedFrame",
    "config_json",
    "episode_schema",
]


@dataclass(frozen=True, eq=False)
class RecordedFrame:
    """One frame as it goes into the dataset.

    Attributes:
        time: The frame's time, node clock (s) (``node_time``).
        images: Camera key -> (height, width, 3) uint8 RGB at the layout's size.
        state: The state vector (float32, the layout's state names).
        action: The action vector (float32, the layout's action names).
        intervention: A human, not the policy, moved the robot.
        task: The prompt in force.
    """

    time: float
    images: Mapping[str, np.ndarray]
    state: np.ndarray
    action: np.ndarray
    intervention: bool
    task: str


@dataclass(frozen=True)
class EpisodeContext:
    """What an episode's row says about where it came from (fixed at its start).

    Attributes:
        source: ``"policy_node"`` or the exported bag's path.
        config_json: The node's parameters as JSON (``relay_ros/config``).
        adapter: The ``lora`` parameter in force, None when there is none.
    """

    source: str
    config_json: str = "{}"
    adapter: str | None = None


@dataclass(frozen=True)
class EpisodeEnd:
    """How an episode ended.

    Attributes:
        reason: ``"reset"``, ``"disabled"``, ``"mark_episode"``, ``"end_episode"``,
            ``"deactivate"``, ``"shutdown"``, ``"end of bag"``...
        success: The operator's mark (``~/mark_episode``), None when not marked.
        frames_dropped: Frames of the recording rate missing from the episode.
    """

    reason: str
    success: bool | None = None
    frames_dropped: int = 0


@dataclass(frozen=True, eq=False)
class FinishedEpisode:
    """An episode's files (in the staging directory) and tables, ready to commit.

    Attributes:
        index: The episode index.
        length: Frames.
        tasks: The episode's distinct tasks, in order of first use.
        data: The data table (one row per frame).
        row: The ``meta/episodes`` row (a one-row table).
        videos: Camera key -> its MP4 in the staging directory.
        stats: Feature -> its statistics.
    """

    index: int
    length: int
    tasks: tuple[str, ...]
    data: pa.Table
    row: pa.Table
    videos: Mapping[str, Path]
    stats: Mapping[str, Mapping[str, np.ndarray]]


def _arrow_column(values: np.ndarray, dtype: str, length: int | None) -> pa.Array[Any]:
    """A data column as ``datasets`` types it: a scalar, or a fixed-size list."""
    array = np.asarray(values, dtype=dtype)
    if length is None:
        return pa.array(array.reshape(-1))
    return pa.FixedSizeListArray.from_arrays(pa.array(array.reshape(-1)), length)


def _stat_type(stat: str, value: np.ndarray) -> pa.DataType:
    """The parquet type of one statistic as ``pa.Table.from_pydict`` infers it from
    ``value.tolist()``: nested lists of doubles, ``count`` of int64."""
    item: pa.DataType = pa.int64() if stat == "count" else pa.float64()
    for _ in range(np.asarray(value).ndim):
        item = pa.list_(item)
    return item


def episode_schema(
    layout: DatasetLayout, stats: Mapping[str, Mapping[str, np.ndarray]]
) -> pa.Schema:
    """The ``meta/episodes`` schema: LeRobot's columns in ``save_episode``'s order,
    then relay_ros's (:data:`~relay_ros.recording.lerobot_format.EXTRA_EPISODE_COLUMNS`)."""
    fields: list[pa.Field[Any]] = [
        pa.field("episode_index", pa.int64()),
        pa.field("tasks", pa.list_(pa.string())),
        pa.field("length", pa.int64()),
        pa.field("data/chunk_index", pa.int64()),
        pa.field("data/file_index", pa.int64()),
        pa.field("dataset_from_index", pa.int64()),
        pa.field("dataset_to_index", pa.int64()),
    ]
    for key in layout.video_keys:
        fields += [
            pa.field(f"videos/{key}/chunk_index", pa.int64()),
            pa.field(f"videos/{key}/file_index", pa.int64()),
            pa.field(f"videos/{key}/from_timestamp", pa.float64()),
            pa.field(f"videos/{key}/to_timestamp", pa.float64()),
        ]
    for feature, feature_stats_ in stats.items():
        for stat, value in feature_stats_.items():
            fields.append(pa.field(f"stats/{feature}/{stat}", _stat_type(stat, value)))
    fields += [
        pa.field("meta/episodes/chunk_index", pa.int64()),
        pa.field("meta/episodes/file_index", pa.int64()),
        pa.field("success", pa.bool_()),
        pa.field("adapter", pa.string()),
        pa.field("relay_ros/end_reason", pa.string()),
        pa.field("relay_ros/source", pa.string()),
        pa.field("relay_ros/start_time", pa.float64()),
        pa.field("relay_ros/frames_dropped", pa.int64()),
        pa.field("relay_ros/config", pa.string()),
        pa.field("relay_ros/version", pa.string()),
    ]
    return pa.schema(fields)


class EpisodeBuffer:
    """The frames of one episode (see the module docstring).

    Args:
        layout: What every frame holds.
        index: The episode index.
        staging: An empty directory for its files (created here).
        settings: The video encoder settings.
        context: Where the episode comes from.

    Raises:
        VideoCodecError: the codec cannot encode the layout's frames.
        OSError: a file cannot be created (a full disk included).
    """

    def __init__(
        self,
        layout: DatasetLayout,
        index: int,
        staging: Path,
        settings: VideoSettings,
        context: EpisodeContext,
    ) -> None:
        self.layout = layout
        self.index = int(index)
        self.staging = staging
        self.context = context
        staging.mkdir(parents=True)
        self._videos: dict[str, VideoWriter] = {}
        try:
            for i, key in enumerate(layout.cameras):
                self._videos[key] = VideoWriter(
                    staging / f"camera-{i}.mp4", layout.fps, layout.image_size, settings
                )
        except BaseException:
            self.abandon()
            raise
        self._pixels = {key: PixelStats() for key in layout.cameras}
        self._times: list[float] = []
        self._states: list[np.ndarray] = []
        self._actions: list[np.ndarray] = []
        self._interventions: list[bool] = []
        self._tasks: list[str] = []

    @property
    def length(self) -> int:
        """Frames added so far."""
        return len(self._times)

    @property
    def tasks(self) -> list[str]:
        """Each frame's task, in frame order."""
        return list(self._tasks)

    @property
    def start_time(self) -> float | None:
        """The first frame's time (node clock), None before it."""
        return self._times[0] if self._times else None

    def add(self, frame: RecordedFrame) -> None:
        """Encode the frame's images and keep its numbers.

        Raises:
            ValueError: a vector or image of the wrong shape (nothing is added).
            OSError: the disk is full or failing.
        """
        state = np.asarray(frame.state, dtype=np.float32)
        action = np.asarray(frame.action, dtype=np.float32)
        if state.shape != (len(self.layout.state_names),):
            raise ValueError(
                f"state of shape {state.shape}; expected ({len(self.layout.state_names)},)"
            )
        if action.shape != (len(self.layout.action_names),):
            raise ValueError(
                f"action of shape {action.shape}; expected ({len(self.layout.action_names)},)"
            )
        for key in self.layout.cameras:
            self._videos[key].add(frame.images[key])
            self._pixels[key].update(frame.images[key])
        self._times.append(float(frame.time))
        self._states.append(state)
        self._actions.append(action)
        self._interventions.append(bool(frame.intervention))
        self._tasks.append(frame.task)

    def abandon(self) -> None:
        """Close the encoders without finishing (the files are deleted by the caller)."""
        for video in self._videos.values():
            video.abandon()

    def finish(
        self, first_index: int, task_index: Mapping[str, int], end: EpisodeEnd
    ) -> FinishedEpisode:
        """Close the videos and build the episode's tables.

        Args:
            first_index: The dataset-wide ``index`` of its first frame.
            task_index: Task text -> task index for every task of the episode.
            end: How it ended.

        Raises:
            ValueError: no frame was added.
            OSError: the disk is full or failing.
        """
        n = self.length
        if n == 0:
            raise ValueError(f"episode {self.index} has no frame")
        durations = {key: video.close() for key, video in self._videos.items()}
        layout = self.layout
        features = layout.features()
        frame_index = np.arange(n, dtype=np.int64)
        columns: dict[str, np.ndarray] = {
            "action": np.stack(self._actions),
            "observation.state": np.stack(self._states),
            "intervention": np.array(self._interventions, dtype=bool),
            "node_time": np.array(self._times, dtype=np.float64),
            "timestamp": (frame_index / layout.fps).astype(np.float32),
            "frame_index": frame_index,
            "episode_index": np.full(n, self.index, dtype=np.int64),
            "index": np.arange(first_index, first_index + n, dtype=np.int64),
            "task_index": np.array([task_index[t] for t in self._tasks], dtype=np.int64),
        }
        names = layout.data_columns()
        arrays = [
            _arrow_column(columns[name], *feature_dtype_of_column(features[name])) for name in names
        ]
        schema = pa.schema(
            [pa.field(name, array.type) for name, array in zip(names, arrays)],
            metadata={"huggingface": hf_features_json(features)},
        )
        data = pa.Table.from_arrays(arrays, schema=schema)

        stats: dict[str, dict[str, np.ndarray]] = {}
        for name, ft in features.items():
            if ft["dtype"] == "video":
                camera = name[len("observation.images.") :]
                stats[name] = self._pixels[camera].statistics()
            else:
                column = columns[name]
                # A bool column's statistics are floats (LeRobot promotes to float32).
                stats[name] = feature_stats(
                    column.astype(np.float32) if column.dtype == bool else column
                )
        tasks = tuple(dict.fromkeys(self._tasks))
        chunk, file = chunk_and_file(self.index)
        row: dict[str, object] = {
            "episode_index": self.index,
            "tasks": list(tasks),
            "length": n,
            "data/chunk_index": chunk,
            "data/file_index": file,
            "dataset_from_index": first_index,
            "dataset_to_index": first_index + n,
        }
        for camera, key in zip(layout.cameras, layout.video_keys):
            row[f"videos/{key}/chunk_index"] = chunk
            row[f"videos/{key}/file_index"] = file
            row[f"videos/{key}/from_timestamp"] = 0.0
            row[f"videos/{key}/to_timestamp"] = durations[camera]
        for feature, values in stats.items():
            for stat, value in values.items():
                row[f"stats/{feature}/{stat}"] = np.asarray(value).tolist()
        row.update(
            {
                "meta/episodes/chunk_index": chunk,
                "meta/episodes/file_index": file,
                "success": end.success,
                "adapter": self.context.adapter,
                "relay_ros/end_reason": end.reason,
                "relay_ros/source": self.context.source,
                "relay_ros/start_time": self._times[0],
                "relay_ros/frames_dropped": int(end.frames_dropped),
                "relay_ros/config": self.context.config_json,
                "relay_ros/version": __version__,
            }
        )
        schema_row = episode_schema(layout, stats)
        table = pa.Table.from_pylist([row], schema=schema_row)
        return FinishedEpisode(
            index=self.index,
            length=n,
            tasks=tasks,
            data=data,
            row=table,
            videos={key: self._videos[key].path for key in layout.cameras},
            stats=stats,
        )


def config_json(parameters: Mapping[str, object]) -> str:
    """Parameters (name -> value) as the ``relay_ros/config`` JSON: sorted, values
    that JSON cannot hold as their text."""
    return json.dumps(dict(sorted(parameters.items())), default=str)
