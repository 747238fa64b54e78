"""What the demo records while it runs: every published chunk and every latency sample.

`ChunkRecorder` keeps the chunks policy_node publishes on ``~/preview`` (all commanded
joints in one ``JointTrajectory``), in the demo's joint order; `LatencyCollector`
keeps every sample of policy_node's rolling latency statistics. Both are fed from
ROS callbacks or the main thread and read from the main thread; neither imports rclpy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from relay_ros.pipeline.trajectory import read_joint_trajectory

__all__ = ["ChunkRecorder", "LatencyCollector", "RecordedChunk"]

#: ``(stamp, absolute point times (N,), positions (N, D))`` of one published chunk.
RecordedChunk = tuple[float, np.ndarray, np.ndarray]


class ChunkRecorder:
    """Thread-safe list of the chunks published for ``joints`` (any column order).

    Args:
        joints: The commanded joints, in the order of the recorded columns.
    """

    def __init__(self, joints: Sequence[str]) -> None:
        self.joints = tuple(joints)
        #: Called with the first chunk's stamp when it arrives (the demo starts the
        #: world there), from the subscription's thread.
        self.on_first: Callable[[float], None] | None = None
        self._column = {name: i for i, name in enumerate(self.joints)}
        self._chunks: list[RecordedChunk] = []
        self._lock = threading.Lock()

    def on_preview(self, msg: Any) -> None:
        """``JointTrajectory`` callback: keep the chunk if it has exactly our joints."""
        data = read_joint_trajectory(msg)
        if sorted(data.joint_names) != sorted(self.joints) or not data.positions:
            return
        raw = data.position_array()
        positions = np.empty_like(raw)
        for i, name in enumerate(data.joint_names):
            positions[:, self._column[name]] = raw[:, i]
        with self._lock:
            first = not self._chunks
            self._chunks.append((data.stamp, data.times, positions))
        if first and self.on_first is not None:
            self.on_first(data.stamp)

    def first_stamp(self) -> float | None:
        """Publication time of the first chunk, or None before it."""
        with self._lock:
            return self._chunks[0][0] if self._chunks else None

    def chunks(self) -> list[RecordedChunk]:
        """A copy of the recorded chunks, in order of arrival."""
        with self._lock:
            return list(self._chunks)


class LatencyCollector:
    """Keeps every latency sample of a rolling `LatencyStats` by polling it often enough."""

    def __init__(self) -> None:
        self._seen = 0
        self.samples: list[float] = []

    def poll(self, stats: Any) -> None:
        """Append the samples ``stats`` gained since the last poll."""
        values = stats.values()
        count = int(stats.count)
        new = count - self._seen
        if new > 0:
            self.samples.extend(values[-min(new, len(values)) :])
        self._seen = count
