"""LeRobot's published v3.0 dataset layout, transcribed, and a check of a dataset against it.

Transcribed by hand (not imported from relay_ros.recording) from huggingface/lerobot
at commit 7427f31801f944f5ec9ce53cda02862ce7d1638b (``CODEBASE_VERSION = "v3.0"``):

- ``src/lerobot/datasets/utils.py``: ``INFO_PATH``, ``STATS_PATH``,
  ``DEFAULT_TASKS_PATH``, ``DEFAULT_EPISODES_PATH``, ``DEFAULT_DATA_PATH``,
  ``DEFAULT_VIDEO_PATH`` (``CHUNK_FILE_PATTERN``), ``DEFAULT_CHUNK_SIZE`` = 1000,
  ``DEFAULT_DATA_FILE_SIZE_IN_MB`` = 100, ``DEFAULT_VIDEO_FILE_SIZE_IN_MB`` = 200, and
  ``DatasetInfo``'s fields in order (``tools`` dropped when unset by ``to_dict``);
- ``src/lerobot/utils/constants.py``: ``DEFAULT_FEATURES``;
- ``src/lerobot/utils/feature_utils.py`` ``hw_to_dataset_features``: ``action`` /
  ``observation.state`` float32 (n,) named per joint; cameras
  ``observation.images.<key>``, dtype video, (h, w, 3), names height/width/channels;
- ``src/lerobot/datasets/video_utils.py`` ``get_video_info`` and
  ``src/lerobot/configs/video.py`` (``RGBEncoderConfig`` defaults): a camera's
  ``info`` block;
- ``src/lerobot/datasets/feature_utils.py`` ``get_hf_features_from_features``: the
  data parquet's arrow types (shape (1,) scalar, (n,) fixed_size_list) and the
  ``huggingface`` schema metadata of ``datasets`` >= 4 (``{"info": {"features": ...}}``);
- ``src/lerobot/datasets/dataset_metadata.py`` ``save_episode`` /
  ``_save_episode_metadata`` and ``dataset_writer.py`` ``_save_episode_data`` /
  ``_save_episode_video``: the episodes parquet's columns and their order;
- ``src/lerobot/datasets/compute_stats.py``: statistics keys (min, max, mean, std,
  count, q01, q10, q50, q90, q99) and shapes ((n,) vectors, (1,) scalars, (3, 1, 1)
  images, count (1,));
- ``src/lerobot/datasets/io_utils.py`` ``write_tasks`` (``DataFrame.to_parquet``
  of a frame indexed by ``task``): tasks.parquet's columns and pandas index metadata;
- ``src/lerobot/rollout/context.py``: the ``intervention`` feature of a rollout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

CODEBASE_VERSION = "v3.0"
INFO_KEYS = [  # DatasetInfo field order
    "codebase_version",
    "fps",
    "features",
    "total_episodes",
    "total_frames",
    "total_tasks",
    "chunks_size",
    "data_files_size_in_mb",
    "video_files_size_in_mb",
    "data_path",
    "video_path",
    "robot_type",
    "splits",
]
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
STAT_KEYS = ["min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"]
# get_video_info (stream fields, then asdict(RGBEncoderConfig()) minus vcodec), after
# the feature's own {"is_depth_map": False}.
VIDEO_INFO_KEYS = [
    "is_depth_map",
    "video.height",
    "video.width",
    "video.codec",
    "video.pix_fmt",
    "video.fps",
    "video.channels",
    "has_audio",
    "video.g",
    "video.crf",
    "video.preset",
    "video.fast_decode",
    "video.video_backend",
    "video.extra_options",
]
LIBSVTAV1_DEFAULTS = {
    "video.codec": "av1",
    "video.pix_fmt": "yuv420p",
    "video.channels": 3,
    "has_audio": False,
    "video.g": 2,
    "video.crf": 30,
    "video.preset": 12,
    "video.fast_decode": 0,
    "video.video_backend": "pyav",
    "video.extra_options": {},
    "is_depth_map": False,
}
_ARROW = {
    "float32": pa.float32(),
    "float64": pa.float64(),
    "int64": pa.int64(),
    "bool": pa.bool_(),
}


def expected_arrow_type(feature: dict[str, Any]) -> pa.DataType:
    """``datasets``' arrow type of a feature (get_hf_features_from_features)."""
    item = _ARROW[feature["dtype"]]
    shape = list(feature["shape"])
    return item if shape == [1] else pa.list_(item, shape[0])


def expected_hf_metadata(features: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, ft in features.items():
        if ft["dtype"] == "video":
            continue
        value = {"dtype": ft["dtype"], "_type": "Value"}
        out[name] = (
            value
            if list(ft["shape"]) == [1]
            else {"feature": value, "length": ft["shape"][0], "_type": "List"}
        )
    return {"info": {"features": out}}


def check_dataset(
    root: Path,
    *,
    cameras: list[str],
    state_names: list[str],
    action_names: list[str],
    fps: int,
    image_size: tuple[int, int],
) -> dict[str, Any]:
    """Check the dataset at ``root`` against LeRobot's v3.0 layout field by field;
    returns info.json. Fails with the first field that differs."""
    info = json.loads((root / "meta" / "info.json").read_text(encoding="utf-8"))
    assert list(info) == INFO_KEYS
    assert info["codebase_version"] == CODEBASE_VERSION
    assert info["fps"] == fps
    assert info["chunks_size"] == 1000
    assert info["data_files_size_in_mb"] == 100 and info["video_files_size_in_mb"] == 200
    assert info["data_path"] == DATA_PATH and info["video_path"] == VIDEO_PATH
    total = info["total_episodes"]
    assert info["splits"] == ({"train": f"0:{total}"} if total else {})
    features = info["features"]
    video_keys = [f"observation.images.{key}" for key in cameras]
    assert list(features)[-5:] == list(DEFAULT_FEATURES)
    for name, ft in DEFAULT_FEATURES.items():
        assert features[name] == ft
    assert features["action"] == {
        "dtype": "float32",
        "shape": [len(action_names)],
        "names": action_names,
    }
    assert features["observation.state"] == {
        "dtype": "float32",
        "shape": [len(state_names)],
        "names": state_names,
    }
    assert features["intervention"] == {"dtype": "bool", "shape": [1], "names": None}
    for key in video_keys:
        ft = features[key]
        assert ft["dtype"] == "video"
        assert ft["shape"] == [image_size[0], image_size[1], 3]
        assert ft["names"] == ["height", "width", "channels"]
        assert list(ft["info"]) == VIDEO_INFO_KEYS
        assert ft["info"]["video.height"] == image_size[0]
        assert ft["info"]["video.width"] == image_size[1]
        assert ft["info"]["video.fps"] == fps
    assert [k for k, ft in features.items() if ft["dtype"] == "video"] == video_keys

    # meta/tasks.parquet: task_index column, task as the pandas index.
    tasks = pq.read_table(root / "meta" / "tasks.parquet")
    assert tasks.schema.names == ["task_index", "task"]
    assert tasks.schema.field("task_index").type == pa.int64()
    assert tasks.schema.field("task").type == pa.string()
    pandas_meta = json.loads(tasks.schema.metadata[b"pandas"])
    assert pandas_meta["index_columns"] == ["task"]
    assert info["total_tasks"] == tasks.num_rows

    # meta/stats.json: every feature with LeRobot's statistics and their shapes.
    stats = json.loads((root / "meta" / "stats.json").read_text(encoding="utf-8"))
    assert set(stats) == set(features)
    for name, ft in features.items():
        assert list(stats[name]) == STAT_KEYS, name
        for key, value in stats[name].items():
            if key == "count":
                assert len(value) == 1
            elif ft["dtype"] == "video":
                assert [len(value), len(value[0]), len(value[0][0])] == [3, 1, 1], (name, key)
            else:
                assert len(value) == ft["shape"][0], (name, key)

    # Episodes: LeRobot's columns in save_episode's order, then extras.
    frames = 0
    paths = sorted((root / "meta" / "episodes").glob("*/*.parquet"))
    assert len(paths) == total
    for i, path in enumerate(paths):
        assert path == root / EPISODES_PATH.format(chunk_index=i // 1000, file_index=i % 1000)
        table = pq.read_table(path)
        expected = [
            "episode_index",
            "tasks",
            "length",
            "data/chunk_index",
            "data/file_index",
            "dataset_from_index",
            "dataset_to_index",
        ]
        for key in video_keys:
            expected += [
                f"videos/{key}/chunk_index",
                f"videos/{key}/file_index",
                f"videos/{key}/from_timestamp",
                f"videos/{key}/to_timestamp",
            ]
        expected += [f"stats/{name}/{key}" for name in features for key in STAT_KEYS]
        expected += ["meta/episodes/chunk_index", "meta/episodes/file_index"]
        assert table.schema.names[: len(expected)] == expected
        types = {f.name: f.type for f in table.schema}
        for column in expected:
            if column == "tasks":
                assert types[column] == pa.list_(pa.string())
            elif column.endswith("_timestamp"):
                assert types[column] == pa.float64()
            elif column.startswith("stats/"):
                assert pa.types.is_list(types[column]), column
            else:
                assert types[column] == pa.int64(), column
        row = table.to_pylist()[0]
        assert row["episode_index"] == i
        assert row["dataset_from_index"] == frames
        frames += row["length"]
        assert row["dataset_to_index"] == frames
        assert row["meta/episodes/chunk_index"] * 1000 + row["meta/episodes/file_index"] == i

        # Its data file: the non-video features in info.json order, datasets' types.
        data_path = root / DATA_PATH.format(
            chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
        )
        schema = pq.read_schema(data_path)
        columns = [name for name, ft in features.items() if ft["dtype"] != "video"]
        assert schema.names == columns
        for name in columns:
            assert schema.field(name).type == expected_arrow_type(features[name]), name
        assert json.loads(schema.metadata[b"huggingface"]) == expected_hf_metadata(features)
        assert pq.read_metadata(data_path).num_rows == row["length"]
        for key in video_keys:
            video = root / VIDEO_PATH.format(
                video_key=key,
                chunk_index=row[f"videos/{key}/chunk_index"],
                file_index=row[f"videos/{key}/file_index"],
            )
            assert video.is_file(), video
            assert row[f"videos/{key}/from_timestamp"] == 0.0
            assert abs(row[f"videos/{key}/to_timestamp"] - row["length"] / fps) < 1e-6
    assert info["total_frames"] == frames
    return info
