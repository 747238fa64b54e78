"""The LeRobot dataset format v3.0, as data: paths, features, info.json, parquet schemas.

Transcribed from LeRobot's own dataset code (huggingface/lerobot at commit
7427f31801f944f5ec9ce53cda02862ce7d1638b, ``CODEBASE_VERSION = "v3.0"``), without
importing it (it pulls in torch):

- ``src/lerobot/datasets/utils.py``: the path templates (``DEFAULT_DATA_PATH``,
  ``DEFAULT_VIDEO_PATH``, ``DEFAULT_EPISODES_PATH``, ``DEFAULT_TASKS_PATH``,
  ``INFO_PATH``, ``STATS_PATH``), ``DEFAULT_CHUNK_SIZE`` and the file size limits,
  ``DatasetInfo`` (the fields of ``meta/info.json`` and their order);
- ``src/lerobot/utils/constants.py``: ``DEFAULT_FEATURES`` (timestamp, frame_index,
  episode_index, index, task_index), appended after the user's features by
  ``LeRobotDatasetMetadata.create``;
- ``src/lerobot/utils/feature_utils.py`` (``hw_to_dataset_features``): ``action`` and
  ``observation.state`` as float32 vectors named per joint, each camera as
  ``observation.images.<key>`` of dtype ``video``, shape (height, width, 3) and names
  ``["height", "width", "channels"]``;
- ``src/lerobot/datasets/feature_utils.py`` (``get_hf_features_from_features``) and
  ``dataset_writer.py`` (``_save_episode_data``): the data parquet's columns are the
  non-video features, typed by Hugging Face ``datasets`` (shape (1,) -> a scalar
  ``Value``, a vector -> a fixed-size list), with the ``huggingface`` schema metadata
  ``datasets`` writes; snappy compression, dictionary encoding;
- ``src/lerobot/datasets/dataset_metadata.py`` (``save_episode``,
  ``_save_episode_metadata``): one row per episode in ``meta/episodes``: its index,
  tasks, length, data and video file indices, video ``from_timestamp`` /
  ``to_timestamp``, ``stats/<feature>/<stat>`` and its own file indices;
  ``io_utils.write_tasks``: ``meta/tasks.parquet`` is a pandas frame indexed by the
  task text with a ``task_index`` column;
- ``src/lerobot/rollout/context.py``: the per-frame ``intervention`` flag (bool,
  shape (1,)) of LeRobot's own rollouts with human intervention.

LeRobot packs many episodes into each data and video file; a recorder that must lose
at most the episode in progress writes each episode into files of its own (file
index = episode index, chunk = index // ``chunks_size``), which the format allows
(LeRobot moves to a new file whenever a file is full or a recording resumes).

Plain Python: NumPy only (the parquet schemas are built by :mod:`.dataset`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHUNKS_SIZE",
    "CODEBASE_VERSION",
    "DATA_FILES_SIZE_IN_MB",
    "DATA_PATH",
    "DEFAULT_FEATURES",
    "EPISODES_PATH",
    "EXTRA_EPISODE_COLUMNS",
    "INFO_PATH",
    "LEROBOT_COMMIT",
    "STATS_PATH",
    "TASKS_PATH",
    "VIDEO_FILES_SIZE_IN_MB",
    "VIDEO_PATH",
    "DatasetLayout",
    "chunk_and_file",
    "describe_difference",
    "feature_dtype_of_column",
    "hf_features_json",
    "info_json",
    "layout_from_info",
    "tasks_pandas_metadata",
]

#: The LeRobot commit the format below was transcribed from.
LEROBOT_COMMIT = "7427f31801f944f5ec9ce53cda02862ce7d1638b"
#: ``CODEBASE_VERSION`` of that commit: the dataset format written.
CODEBASE_VERSION = "v3.0"

#: Files per chunk directory (``DEFAULT_CHUNK_SIZE``).
CHUNKS_SIZE = 1000
#: LeRobot's file size limits (``DEFAULT_DATA_FILE_SIZE_IN_MB``, ``..._VIDEO_...``);
#: recorded in info.json (one episode per file stays far below them).
DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 200

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
_CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
EPISODES_PATH = "meta/episodes/" + _CHUNK_FILE + ".parquet"
DATA_PATH = "data/" + _CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + _CHUNK_FILE + ".mp4"

#: Features every frame has, filled in by the writer (``DEFAULT_FEATURES``).
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}

#: Episode columns relay_ros adds after LeRobot's (LeRobot's loader keeps unknown
#: columns): name -> what it holds.
EXTRA_EPISODE_COLUMNS: dict[str, str] = {
    "success": "true/false as marked through ~/mark_episode; null when not marked",
    "adapter": "the policy_node 'lora' parameter in force (null: none)",
    "relay_ros/end_reason": "why the episode ended (reset, disabled, mark_episode, ...)",
    "relay_ros/source": "'policy_node' for a live recording, else the exported bag",
    "relay_ros/start_time": "node clock (s) of frame 0 (bag time for an export)",
    "relay_ros/frames_dropped": "frames of the recording rate missing from the episode",
    "relay_ros/config": "the node's parameters at the episode's start, as JSON",
    "relay_ros/version": "relay_ros version that wrote the episode",
}


def chunk_and_file(episode_index: int) -> tuple[int, int]:
    """The (chunk, file) index of episode ``episode_index``'s own files: the
    sequence of LeRobot's ``update_chunk_file_indices`` from (0, 0)."""
    return divmod(int(episode_index), CHUNKS_SIZE)


@dataclass(frozen=True)
class DatasetLayout:
    """What every frame of one dataset holds: fixed from its first episode on.

    Attributes:
        fps: Recording rate (frames per second, LeRobot's integer ``fps``).
        cameras: The camera map's keys; each is stored as ``observation.images.<key>``.
        image_size: (height, width) of the stored frames.
        state_names: The state vector's joints, in the model's order.
        action_names: The action vector's entries, in the model's action order.
        robot_type: ``robot_type`` of info.json (None: not given).
        video_info: The ``info`` block of each camera feature (codec, pixel format,
            encoder settings: :func:`relay_ros.recording.video.video_info`).
    """

    fps: int
    cameras: tuple[str, ...]
    image_size: tuple[int, int]
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    robot_type: str | None
    video_info: Mapping[str, Any]

    def __post_init__(self) -> None:
        if isinstance(self.fps, bool) or not isinstance(self.fps, int) or self.fps <= 0:
            raise ValueError(f"fps is {self.fps!r}; expected a positive integer")
        if not self.cameras:
            raise ValueError("a dataset needs at least one camera")
        for key in self.cameras:
            if "/" in key or not key:
                raise ValueError(f"camera key {key!r} must be non-empty and without '/'")
        if not self.state_names or not self.action_names:
            raise ValueError("a dataset needs state and action names")

    @staticmethod
    def video_key(camera: str) -> str:
        """The feature (and video directory) name of camera key ``camera``."""
        return f"observation.images.{camera}"

    @property
    def video_keys(self) -> tuple[str, ...]:
        """The camera features, in camera map order."""
        return tuple(self.video_key(key) for key in self.cameras)

    def features(self) -> dict[str, dict[str, Any]]:
        """info.json's ``features``: action, state, cameras, the intervention flag and
        the node time, then LeRobot's default features."""
        height, width = self.image_size
        features: dict[str, dict[str, Any]] = {
            "action": {
                "dtype": "float32",
                "shape": [len(self.action_names)],
                "names": list(self.action_names),
            },
            "observation.state": {
                "dtype": "float32",
                "shape": [len(self.state_names)],
                "names": list(self.state_names),
            },
        }
        for key in self.video_keys:
            features[key] = {
                "dtype": "video",
                "shape": [height, width, 3],
                "names": ["height", "width", "channels"],
                "info": dict(self.video_info),
            }
        # True while a human (teleoperation), not the policy, moved the robot.
        features["intervention"] = {"dtype": "bool", "shape": [1], "names": None}
        # The frame's time on the node clock: 'timestamp' is frame_index / fps, as the
        # format requires; this shows the real spacing (gaps where frames were dropped).
        features["node_time"] = {"dtype": "float64", "shape": [1], "names": None}
        return {**features, **json.loads(json.dumps(DEFAULT_FEATURES))}

    def data_columns(self) -> list[str]:
        """The data parquet's columns, in order: every feature but the videos."""
        return [name for name, ft in self.features().items() if ft["dtype"] != "video"]


def feature_dtype_of_column(feature: Mapping[str, Any]) -> tuple[str, int | None]:
    """``(numpy dtype, fixed length or None)`` a feature takes in the data parquet:
    shape (1,) is a scalar column (``datasets.Value``), (n,) a fixed-size list."""
    shape = list(feature["shape"])
    if shape == [1]:
        return str(feature["dtype"]), None
    if len(shape) == 1:
        return str(feature["dtype"]), int(shape[0])
    raise ValueError(f"feature of shape {shape} has no column form here")


def hf_features_json(features: Mapping[str, Mapping[str, Any]]) -> str:
    """The ``huggingface`` schema metadata of the data parquet: what ``datasets``
    writes for LeRobot's features (``{"info": {"features": ...}}``, datasets >= 4)."""
    out: dict[str, Any] = {}
    for name, ft in features.items():
        if ft["dtype"] == "video":
            continue
        dtype, length = feature_dtype_of_column(ft)
        value = {"dtype": dtype, "_type": "Value"}
        out[name] = (
            value if length is None else {"feature": value, "length": length, "_type": "List"}
        )
    return json.dumps({"info": {"features": out}})


def info_json(
    layout: DatasetLayout, *, total_episodes: int, total_frames: int, total_tasks: int
) -> dict[str, Any]:
    """meta/info.json, its fields in ``DatasetInfo.to_dict()`` order."""
    return {
        "codebase_version": CODEBASE_VERSION,
        "fps": layout.fps,
        "features": layout.features(),
        "total_episodes": int(total_episodes),
        "total_frames": int(total_frames),
        "total_tasks": int(total_tasks),
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": DATA_FILES_SIZE_IN_MB,
        "video_files_size_in_mb": VIDEO_FILES_SIZE_IN_MB,
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH,
        "robot_type": layout.robot_type,
        "splits": {"train": f"0:{int(total_episodes)}"} if total_episodes else {},
    }


def tasks_pandas_metadata(pyarrow_version: str) -> str:
    """The ``pandas`` schema metadata that makes ``pd.read_parquet(meta/tasks.parquet)``
    index the frame by task text, as LeRobot's ``write_tasks`` (``DataFrame.to_parquet``)
    leaves it: LeRobot looks tasks up with ``tasks.loc[task]`` and
    ``tasks.iloc[i].name``."""
    return json.dumps(
        {
            "index_columns": ["task"],
            "column_indexes": [
                {
                    "name": None,
                    "field_name": None,
                    "pandas_type": "unicode",
                    "numpy_type": "object",
                    "metadata": {"encoding": "UTF-8"},
                }
            ],
            "columns": [
                {
                    "name": "task_index",
                    "field_name": "task_index",
                    "pandas_type": "int64",
                    "numpy_type": "int64",
                    "metadata": None,
                },
                {
                    "name": "task",
                    "field_name": "task",
                    "pandas_type": "unicode",
                    "numpy_type": "object",
                    "metadata": None,
                },
            ],
            "attributes": {},
            "creator": {"library": "pyarrow", "version": pyarrow_version},
            "pandas_version": "2.3.3",
        }
    )


def layout_from_info(info: Mapping[str, Any]) -> DatasetLayout:
    """The :class:`DatasetLayout` an existing dataset's info.json describes.

    Raises:
        ValueError: info.json is not a dataset this package writes (another format
            version, features it does not have); the message names the field.
    """
    version = info.get("codebase_version")
    if version != CODEBASE_VERSION:
        raise ValueError(
            f"codebase_version is {version!r}; this recorder writes {CODEBASE_VERSION!r}"
        )
    features = info.get("features")
    if not isinstance(features, Mapping):
        raise ValueError("info.json has no 'features' map")
    try:
        cameras = tuple(
            name[len("observation.images.") :]
            for name, ft in features.items()
            if ft.get("dtype") == "video"
        )
        video = features[f"observation.images.{cameras[0]}"] if cameras else None
        if video is None:
            raise ValueError("info.json has no camera feature")
        height, width = int(video["shape"][0]), int(video["shape"][1])
        layout = DatasetLayout(
            fps=int(info["fps"]),
            cameras=cameras,
            image_size=(height, width),
            state_names=tuple(features["observation.state"]["names"]),
            action_names=tuple(features["action"]["names"]),
            robot_type=info.get("robot_type"),
            video_info=dict(video.get("info") or {}),
        )
    except (KeyError, TypeError, IndexError) as exc:
        raise ValueError(f"info.json features are not this recorder's: missing {exc}") from None
    if layout.features() != json.loads(json.dumps(dict(features))):
        raise ValueError("info.json features differ from the ones this recorder writes")
    return layout


def describe_difference(old: DatasetLayout, new: DatasetLayout) -> str:
    """What differs between two layouts, in words (for the log)."""
    parts = []
    for field in ("fps", "cameras", "image_size", "state_names", "action_names", "robot_type"):
        a, b = getattr(old, field), getattr(new, field)
        if a != b:
            parts.append(f"{field} {_show(a)} -> {_show(b)}")
    if not parts and dict(old.video_info) != dict(new.video_info):
        keys = sorted(
            k
            for k in set(old.video_info) | set(new.video_info)
            if old.video_info.get(k) != new.video_info.get(k)
        )
        parts.append(f"video settings {keys}")
    return "; ".join(parts) or "nothing"


def _show(value: Any) -> str:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return str(list(value))
    return repr(value)
