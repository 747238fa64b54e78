"""A LeRobot v3 dataset directory that episodes are committed to, one at a time.

**Each episode in files of its own, committed by one rename.** An episode being
recorded lives in a staging directory (``.relay_ros_partial/``, which LeRobot's
loader never looks at). :meth:`Dataset.commit` moves its videos, then its data
parquet, into their places and renames its ``meta/episodes`` row file into place
last: that rename is the commit. ``meta/info.json``, ``meta/stats.json`` and
``meta/tasks.parquet`` are derived from the committed rows and rewritten after each
commit, each by writing a temporary file and renaming it over the old one. So a
crash, a ``kill -9`` or a full disk at any moment leaves every committed episode
readable, and :class:`Dataset` repairs the rest when it opens the directory again,
with a log line for each repair:

- the staging directory (the episode that was being recorded) is discarded;
- an episode's data or video files without its row (killed between the renames)
  are deleted;
- info.json, stats.json or tasks.parquet that do not match the rows (killed after
  the commit, before they were rewritten) are rewritten.

**Appending.** A directory that already holds a dataset is appended to when the new
episodes have the same layout (:class:`~relay_ros.recording.lerobot_format.DatasetLayout`:
rate, cameras, image size, state and action names, video settings); otherwise
:meth:`Dataset.use_layout` refuses, naming what differs.

**A full disk** (``ENOSPC``, ``EDQUOT``, or ``EFBIG`` past a file size limit) raises
:class:`DiskFullError` from :meth:`Dataset.begin`, :meth:`EpisodeBuffer.add
<relay_ros.recording.episode.EpisodeBuffer.add>` and :meth:`Dataset.commit`; the
caller stops recording and discards the staged episode to free its space.

Not thread-safe: one thread (the recorder's) owns a Dataset.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from relay_ros.recording.episode import (
    EpisodeBuffer,
    EpisodeContext,
    EpisodeEnd,
    FinishedEpisode,
)
from relay_ros.recording.lerobot_format import (
    DATA_PATH,
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    VIDEO_PATH,
    DatasetLayout,
    chunk_and_file,
    describe_difference,
    info_json,
    layout_from_info,
    tasks_pandas_metadata,
)
from relay_ros.recording.stats import aggregate_stats
from relay_ros.recording.video import VideoSettings

__all__ = [
    "STAGING_DIR",
    "CommittedEpisode",
    "Dataset",
    "DatasetError",
    "DiskFullError",
    "is_disk_full",
    "read_episode_rows",
]

#: Where the episode being recorded is staged, under the dataset's root.
STAGING_DIR = ".relay_ros_partial"

_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class Logger(Protocol):
    """Where repairs and commits are reported (a ``logging.Logger`` or rclpy's)."""

    def info(self, message: str) -> Any: ...
    def warning(self, message: str) -> Any: ...


class DatasetError(ValueError):
    """The directory cannot be recorded into; the message names it and says why."""


class DiskFullError(OSError):
    """A write failed because the disk (or a quota or file size limit) is full."""


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is an OSError of a full disk, a quota or a file size limit."""
    return isinstance(exc, OSError) and exc.errno in _DISK_FULL


@dataclass(frozen=True)
class CommittedEpisode:
    """An episode now part of the dataset."""

    index: int
    length: int
    tasks: tuple[str, ...]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    """``data`` at ``path``: written beside it, synced, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _write_parquet(table: pa.Table, path: Path) -> None:
    """``table`` as LeRobot writes parquet (snappy, dictionary encoding), synced."""
    pq.write_table(table, path, compression="snappy", use_dictionary=True)
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _json_bytes(data: Any) -> bytes:
    """JSON as LeRobot's ``write_json`` writes it (indent 4, UTF-8)."""
    return json.dumps(data, indent=4, ensure_ascii=False).encode("utf-8")


def read_episode_rows(root: Path) -> list[dict[str, Any]]:
    """Every ``meta/episodes`` row under ``root``, in file order (one row per file
    here; a LeRobot-written file may hold several)."""
    rows: list[dict[str, Any]] = []
    for path in sorted((root / "meta" / "episodes").glob("*/*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def _row_stats(row: Mapping[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    stats: dict[str, dict[str, np.ndarray]] = {}
    for column, value in row.items():
        if column.startswith("stats/"):
            _, feature, stat = column.split("/")
            stats.setdefault(feature, {})[stat] = np.asarray(value)
    return stats


def _serialize_stats(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, Any]:
    return {
        feature: {stat: np.asarray(value).tolist() for stat, value in values.items()}
        for feature, values in stats.items()
    }


class Dataset:
    """One dataset directory, opened (and repaired) for recording.

    Args:
        root: The directory (created with the first episode if missing).
        log: Where repairs are reported.

    Raises:
        DatasetError: ``root`` is a file, holds something that is not a dataset of
            this recorder, or rows whose files are missing.
        OSError: the directory cannot be read or repaired.
    """

    def __init__(self, root: Path, *, log: Logger) -> None:
        self.root = Path(root)
        self._log = log
        self._layout: DatasetLayout | None = None
        self._rows: list[dict[str, Any]] = []
        self._tasks: dict[str, int] = {}
        self._frames = 0
        if self.root.exists() and not self.root.is_dir():
            raise DatasetError(f"record_dir '{self.root}' is a file; expected a directory")
        if self.root.is_dir():
            self._open_existing()

    # ------------------------------------------------------------------ state
    @property
    def layout(self) -> DatasetLayout | None:
        """The dataset's layout, None for a new dataset before :meth:`use_layout`."""
        return self._layout

    @property
    def episodes(self) -> int:
        """Committed episodes."""
        return len(self._rows)

    @property
    def frames(self) -> int:
        """Committed frames."""
        return self._frames

    # ------------------------------------------------------------------ opening
    def _open_existing(self) -> None:
        root = self.root
        staging = root / STAGING_DIR
        if staging.exists():
            self._discard_staging(staging)
        info_path = root / INFO_PATH
        if not info_path.exists():
            leftovers = sorted(p.name for p in root.iterdir())
            if leftovers:
                raise DatasetError(
                    f"record_dir '{root}' is not empty ({leftovers[:5]}) and has no "
                    f"{INFO_PATH}: not a dataset; choose an empty or new directory"
                )
            return
        try:
            info = json.loads(info_path.read_text(encoding="utf-8"))
            self._layout = layout_from_info(info)
        except (OSError, ValueError) as exc:
            raise DatasetError(
                f"record_dir '{root}' holds a dataset this recorder cannot append to: "
                f"{INFO_PATH}: {exc}; choose another record_dir"
            ) from None
        rows = read_episode_rows(root)
        for expected, row in enumerate(rows):
            index = row.get("episode_index")
            if index != expected:
                found = [r.get("episode_index") for r in rows]
                raise DatasetError(
                    f"record_dir '{root}': episode rows go {found}; expected 0, 1, 2, ... "
                    "without gaps"
                )
            missing = [p for p in self._episode_files(index) if not p.exists()]
            if missing:
                raise DatasetError(
                    f"record_dir '{root}': episode {index} is committed but "
                    f"{[str(p.relative_to(root)) for p in missing]} is missing"
                )
        self._rows = rows
        self._frames = sum(int(row["length"]) for row in rows)
        for row in rows:
            for task in row["tasks"]:
                self._tasks.setdefault(task, len(self._tasks))
        self._delete_orphans()
        self._repair_metadata()
        self._log.info(
            f"recording into '{root}': {len(rows)} episode(s), {self._frames} frame(s) so far"
        )

    def _episode_files(self, index: int) -> list[Path]:
        """The data and video files of episode ``index`` (its row file excluded)."""
        chunk, file = chunk_and_file(index)
        files = [self.root / DATA_PATH.format(chunk_index=chunk, file_index=file)]
        assert self._layout is not None
        for key in self._layout.video_keys:
            files.append(
                self.root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
            )
        return files

    def _discard_staging(self, staging: Path) -> None:
        episodes = sorted(p.name for p in staging.iterdir()) if staging.is_dir() else []
        size = sum(p.stat().st_size for p in staging.rglob("*") if p.is_file())
        shutil.rmtree(staging)
        what = ", ".join(episodes) if episodes else "an empty staging directory"
        self._log.warning(
            f"record_dir '{self.root}': discarded the unfinished episode from the last run "
            f"({what}, {size} bytes; the recorder stopped before it ended)"
        )

    def _delete_orphans(self) -> None:
        """Data and video files of episodes without a committed row."""
        committed = {Path(p) for i in range(len(self._rows)) for p in self._episode_files(i)}
        for pattern in ("data/*/*.parquet", "videos/*/*/*.mp4", "meta/episodes/*/*.parquet.tmp"):
            for path in sorted(self.root.glob(pattern)):
                if path not in committed:
                    path.unlink()
                    self._log.warning(
                        f"record_dir '{self.root}': deleted '{path.relative_to(self.root)}' "
                        "of an episode that was never committed"
                    )

    def _repair_metadata(self) -> None:
        """Rewrite info.json, stats.json and tasks.parquet if they do not match the rows."""
        stale = [
            path
            for path, data in self._metadata_files().items()
            if not _same_content(self.root / path, data)
        ]
        if stale:
            self._write_metadata()
            self._log.warning(
                f"record_dir '{self.root}': repaired {stale} from the {len(self._rows)} "
                "committed episode(s) (the last run stopped before updating them)"
            )

    # ------------------------------------------------------------------ layout
    def use_layout(self, layout: DatasetLayout) -> None:
        """Record episodes of ``layout``: a new dataset is created with it (info.json
        written), an existing one must have it.

        Raises:
            DatasetError: the dataset holds episodes of another layout (says what
                differs).
            OSError: the directory cannot be created.
        """
        if self._layout is not None:
            if self._layout != layout:
                raise DatasetError(
                    f"record_dir '{self.root}' holds {self.episodes} episode(s) of another "
                    f"layout ({describe_difference(self._layout, layout)}); choose a new "
                    "record_dir to record this configuration"
                )
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self._layout = layout
        self._write_metadata()

    # ------------------------------------------------------------------ episodes
    def begin(self, settings: VideoSettings, context: EpisodeContext) -> EpisodeBuffer:
        """A new episode (the next index) staged under ``.relay_ros_partial``.

        Raises:
            DatasetError: no layout yet (:meth:`use_layout` first).
            DiskFullError: no room for its files.
        """
        if self._layout is None:
            raise DatasetError("no layout: call use_layout() before recording")
        index = len(self._rows)
        staging = self.root / STAGING_DIR / f"episode-{index:06d}"
        if staging.exists():
            shutil.rmtree(staging)
        with _disk_errors():
            return EpisodeBuffer(self._layout, index, staging, settings, context)

    def discard(self, buffer: EpisodeBuffer) -> None:
        """Drop a staged episode and its files, also those a failed :meth:`commit`
        moved into place before its row (never raises for a missing file)."""
        buffer.abandon()
        self._remove_staging(buffer)
        if buffer.index >= len(self._rows):
            for path in self._episode_files(buffer.index):
                path.unlink(missing_ok=True)

    def _remove_staging(self, buffer: EpisodeBuffer) -> None:
        shutil.rmtree(buffer.staging, ignore_errors=True)
        staging_root = self.root / STAGING_DIR
        if staging_root.is_dir() and not any(staging_root.iterdir()):
            staging_root.rmdir()

    def commit(self, buffer: EpisodeBuffer, end: EpisodeEnd) -> CommittedEpisode:
        """Make the staged episode part of the dataset (see the module docstring).

        Raises:
            ValueError: the episode has no frame (discard it instead).
            DiskFullError: the disk filled up; before the row's rename the episode is
                not committed (discard it), after it only the derived metadata is stale
                (repaired at the next open).
        """
        task_index = dict(self._tasks)
        for task in dict.fromkeys(buffer.tasks):
            task_index.setdefault(task, len(task_index))
        with _disk_errors():
            finished = buffer.finish(self._frames, task_index, end)
            self._place(finished)
        self._rows.append(finished.row.to_pylist()[0])
        self._tasks = task_index
        self._frames += finished.length
        self._remove_staging(buffer)
        with _disk_errors():
            self._write_metadata()
        return CommittedEpisode(finished.index, finished.length, finished.tasks)

    def _place(self, finished: FinishedEpisode) -> None:
        """Videos, then data, then the row file (the commit) into their places."""
        layout = self._layout
        assert layout is not None
        chunk, file = chunk_and_file(finished.index)
        for camera, key in zip(layout.cameras, layout.video_keys):
            target = self.root / VIDEO_PATH.format(
                video_key=key, chunk_index=chunk, file_index=file
            )
            target.parent.mkdir(parents=True, exist_ok=True)
            _sync_file(finished.videos[camera])
            os.replace(finished.videos[camera], target)
            _fsync_dir(target.parent)
        staging = finished.videos[layout.cameras[0]].parent
        data_tmp = staging / "data.parquet"
        _write_parquet(finished.data, data_tmp)
        data = self.root / DATA_PATH.format(chunk_index=chunk, file_index=file)
        data.parent.mkdir(parents=True, exist_ok=True)
        os.replace(data_tmp, data)
        _fsync_dir(data.parent)
        row_tmp = staging / "episode.parquet"
        _write_parquet(finished.row, row_tmp)
        row = self.root / EPISODES_PATH.format(chunk_index=chunk, file_index=file)
        row.parent.mkdir(parents=True, exist_ok=True)
        os.replace(row_tmp, row)  # the commit
        _fsync_dir(row.parent)

    # ------------------------------------------------------------------ derived metadata
    def _metadata_files(self) -> dict[str, bytes]:
        """info.json, stats.json and tasks.parquet as the committed rows make them."""
        assert self._layout is not None
        info = info_json(
            self._layout,
            total_episodes=len(self._rows),
            total_frames=self._frames,
            total_tasks=len(self._tasks),
        )
        files = {INFO_PATH: _json_bytes(info)}
        if self._rows:
            stats = aggregate_stats([_row_stats(row) for row in self._rows])
            files[STATS_PATH] = _json_bytes(_serialize_stats(stats))
            files[TASKS_PATH] = _tasks_parquet(self._tasks)
        return files

    def _write_metadata(self) -> None:
        for path, data in self._metadata_files().items():
            _write_atomic(self.root / path, data)


def _sync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _same_content(path: Path, data: bytes) -> bool:
    """Whether the file at ``path`` holds what ``data`` holds: the same JSON, or the
    same parquet table (bytes differ between pyarrow versions)."""
    if not path.exists():
        return False
    if path.suffix == ".json":
        try:
            return bool(json.loads(path.read_text(encoding="utf-8")) == json.loads(data))
        except ValueError:
            return False
    try:
        return bool(pq.read_table(path).equals(pq.read_table(pa.BufferReader(data))))
    except (OSError, pa.ArrowException):
        return False


def _tasks_parquet(tasks: Mapping[str, int]) -> bytes:
    """meta/tasks.parquet as LeRobot's ``write_tasks`` leaves it (pandas metadata
    indexing it by task text), as bytes."""
    names = sorted(tasks, key=lambda t: tasks[t])
    fields: list[pa.Field[Any]] = [
        pa.field("task_index", pa.int64()),
        pa.field("task", pa.string()),
    ]
    schema = pa.schema(
        fields,
        metadata={"pandas": tasks_pandas_metadata(pa.__version__)},
    )
    table = pa.Table.from_arrays(
        [pa.array([tasks[t] for t in names], pa.int64()), pa.array(names, pa.string())],
        schema=schema,
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy", use_dictionary=True)
    return sink.getvalue().to_pybytes()


@contextlib.contextmanager
def _disk_errors() -> Iterator[None]:
    """Turns an OSError of a full disk into :class:`DiskFullError` (same errno)."""
    try:
        yield
    except OSError as exc:
        if is_disk_full(exc) and not isinstance(exc, DiskFullError):
            raise DiskFullError(exc.errno, exc.strerror, exc.filename) from exc
        raise
