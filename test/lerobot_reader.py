"""Reads a LeRobot v3 dataset back with pyarrow and PyAV only, as a test instrument.

Independent of relay_ros.recording (it follows the paths and columns LeRobot's loader
follows: meta/info.json, meta/episodes/*/*.parquet, the data file and video file each
row names), so a test that writes with one and reads with the other checks the
format, not a round trip through the same code. test_recording.py proves it on a
dataset with known contents.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


@dataclass
class Episode:
    """One episode as LeRobot would load it."""

    row: dict[str, Any]
    data: dict[str, np.ndarray]  # column -> (n,) or (n, d)
    videos: dict[str, np.ndarray]  # feature -> (n, h, w, 3) uint8, frames at the data's timestamps
    video_times: dict[str, np.ndarray]  # feature -> decoded frame times (s)

    @property
    def length(self) -> int:
        return int(self.row["length"])


@dataclass
class LoadedDataset:
    root: Path
    info: dict[str, Any]
    stats: dict[str, Any] | None
    tasks: list[str]  # by task_index
    episodes: list[Episode]


def _column(table: Any, name: str) -> np.ndarray:
    column = table.column(name).combine_chunks()
    if pa.types.is_fixed_size_list(column.type):
        return column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), -1)
    return column.to_numpy(zero_copy_only=False)


def decode_video(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every frame of the MP4 at ``path`` as RGB, with its presentation time (s)."""
    frames, times = [], []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            frames.append(frame.to_ndarray(format="rgb24"))
            times.append(float(frame.pts * frame.time_base))
    return np.stack(frames), np.array(times)


def load(root: Path, *, videos: bool = True) -> LoadedDataset:
    """The dataset at ``root``: info, stats, tasks, and every episode's rows and frames."""
    info = json.loads((root / "meta" / "info.json").read_text())
    stats_path = root / "meta" / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else None
    tasks_table = (
        pq.read_table(root / "meta" / "tasks.parquet")
        if (root / "meta" / "tasks.parquet").exists()
        else None
    )
    tasks: list[str] = []
    if tasks_table is not None:
        order = np.argsort(tasks_table.column("task_index").to_numpy())
        tasks = [tasks_table.column("task").to_pylist()[i] for i in order]
    rows: list[dict[str, Any]] = []
    for path in sorted((root / "meta" / "episodes").glob("*/*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    episodes = []
    video_keys = [k for k, ft in info["features"].items() if ft["dtype"] == "video"]
    for row in rows:
        data_path = root / info["data_path"].format(
            chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
        )
        table = pq.read_table(data_path)
        mask = table.column("episode_index").to_numpy() == row["episode_index"]
        table = table.filter(mask)
        data = {name: _column(table, name) for name in table.column_names}
        frames: dict[str, np.ndarray] = {}
        times: dict[str, np.ndarray] = {}
        if videos:
            for key in video_keys:
                path = root / info["video_path"].format(
                    video_key=key,
                    chunk_index=row[f"videos/{key}/chunk_index"],
                    file_index=row[f"videos/{key}/file_index"],
                )
                decoded, decoded_times = decode_video(path)
                start = row[f"videos/{key}/from_timestamp"]
                # The frame LeRobot's decoder picks for each timestamp: the closest one.
                want = start + data["timestamp"].astype(np.float64)
                pick = np.abs(want[:, None] - decoded_times[None, :]).argmin(axis=1)
                frames[key] = decoded[pick]
                times[key] = decoded_times[pick] - start
        episodes.append(Episode(row, data, frames, times))
    return LoadedDataset(root, info, stats, tasks, episodes)


def mae(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute error of two uint8 images (0..255)."""
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 images (dB; inf when equal)."""
    mse = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return float("inf") if mse == 0 else 10.0 * np.log10(255.0**2 / mse)
