"""Record ROS 2 topics into a rosbag2 bag (version 8) from rclpy, without ROS bag tools.

The replay command records what the node would have commanded (trajectories,
preview images, diagnostics) so it can be inspected with any rosbag2 tool or read
back with :class:`~relay_ros.bag.reader.BagReader`. Subscriptions are raw
(``raw=True``): the received CDR bytes go into the bag unchanged, no Python
message conversion.

Timestamps: each message is stored at the time the callback received it, read
from the node's clock (``clock="node"``, the default). With ``use_sim_time`` on
and a :class:`~relay_ros.bag.player.BagPlayer` publishing ``/clock``, that is bag
time, so the recorded outputs line up with the replayed inputs. ``clock="system"``
stores wall-clock receive time instead.

Offered QoS: a topic is added to the bag when its first message arrives, with the
QoS profiles its publishers offer at that moment (like ``ros2 bag record``).
Topics that received nothing are still listed, with zero messages.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosbags.typesys import Stores, get_typestore

from .player import message_class
from .reader import BagError, RecordedQos
from .writer import BagWriter

__all__ = ["BagRecorder", "recorded_qos"]

_LOG = logging.getLogger(__name__)

#: Queue depth of the recorder's subscriptions.
DEFAULT_DEPTH = 100


def recorded_qos(profile: QoSProfile) -> RecordedQos:
    """Convert an rclpy ``QoSProfile`` (e.g. a publisher's offered QoS) for the bag."""
    return RecordedQos(
        history=profile.history.name.lower(),
        depth=int(profile.depth),
        reliability=profile.reliability.name.lower(),
        durability=profile.durability.name.lower(),
        deadline_ns=int(profile.deadline.nanoseconds),
        lifespan_ns=int(profile.lifespan.nanoseconds),
        liveliness=profile.liveliness.name.lower(),
        liveliness_lease_duration_ns=int(profile.liveliness_lease_duration.nanoseconds),
        avoid_ros_namespace_conventions=bool(profile.avoid_ros_namespace_conventions),
    )


class BagRecorder:
    """Subscribe to topics on ``node`` and write what arrives into a new bag.

    Args:
        node: The node to subscribe on. The caller spins it (any executor).
            Callbacks only queue the bytes; a writer thread owns the bag (sqlite3
            connections belong to one thread, and disk writes stay off the executor).
        path: Bag directory to create (must not exist).
        topics: Topic -> ROS 2 type, e.g. ``{"/arm_controller/joint_trajectory":
            "trajectory_msgs/msg/JointTrajectory"}``.
        storage: ``"mcap"`` or ``"sqlite3"``.
        qos: Subscription QoS: one profile for all topics, a per-topic mapping
            (missing topics fall back), or None. The fallback is keep_last 100,
            best effort if a publisher discovered now offers best effort, else
            reliable, and transient local if all discovered publishers offer it.
        clock: ``"node"`` (node clock: sim time under use_sim_time) or ``"system"``.

    Use :meth:`close` or the context manager: closing stops the subscriptions,
    writes every message received so far, and finishes the bag.

    Raises:
        BagError: Bad option, unknown type, or the bag cannot be created.
    """

    def __init__(
        self,
        node: Node,
        path: str | os.PathLike[str],
        topics: Mapping[str, str],
        *,
        storage: str = "mcap",
        qos: QoSProfile | Mapping[str, QoSProfile] | None = None,
        clock: str = "node",
    ) -> None:
        if clock not in ("node", "system"):
            raise BagError(f"clock '{clock}' is not one of ['node', 'system']")
        if not topics:
            raise BagError(f"no topics to record into bag '{path}'; expected at least one")
        self.path = Path(path)
        self._node = node
        self._clock = clock
        self._types = dict(topics)
        classes = {topic: message_class(msgtype) for topic, msgtype in self._types.items()}
        known = get_typestore(Stores.ROS2_JAZZY).types
        for topic, msgtype in self._types.items():
            if msgtype not in known:
                raise BagError(
                    f"message type '{msgtype}' of topic '{topic}' is not in the rosbags "
                    f"Jazzy typestore, so it cannot be recorded"
                )
        self._lock = threading.Lock()
        self._closed = False
        self._seen: set[str] = set()
        self._written = dict.fromkeys(self._types, 0)
        self._error: str | None = None
        self._queue: queue.SimpleQueue[tuple[str, int, bytes, list[RecordedQos] | None] | None]
        self._queue = queue.SimpleQueue()
        self._subscriptions: list[Any] = []

        ready = threading.Event()
        created: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._write_loop,
            args=(storage, ready, created),
            name="relay-bag-recorder",
            daemon=True,
        )
        self._thread.start()
        ready.wait()
        if created:
            raise created[0]
        try:
            for topic, cls in classes.items():
                profile = self._qos_for(topic, qos)
                self._subscriptions.append(
                    node.create_subscription(
                        cls, topic, self._callback_for(topic), profile, raw=True
                    )
                )
        except BaseException:
            self.close()
            raise

    @property
    def counts(self) -> dict[str, int]:
        """Messages written so far, per topic (0 for topics not heard yet)."""
        with self._lock:
            return dict(self._written)

    def wait_for(self, counts: Mapping[str, int], timeout: float) -> bool:
        """Wait up to ``timeout`` s (wall) until each topic has at least ``counts[topic]``."""
        deadline = time.monotonic() + timeout
        while True:
            now_counts = self.counts
            if all(now_counts.get(t, 0) >= n for t, n in counts.items()):
                return True
            if time.monotonic() >= deadline or not self._thread.is_alive():
                return False
            time.sleep(0.01)

    def close(self) -> None:
        """Stop recording, write everything received, finish the bag. Idempotent.

        Raises:
            BagError: Writing the bag failed (the message says why).
        """
        with self._lock:
            if self._closed:
                return
            # Callbacks check this flag under the lock: after this point none queues.
            self._closed = True
        for sub in self._subscriptions:
            self._node.destroy_subscription(sub)
        self._subscriptions.clear()
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise BagError(self._error)
        _LOG.debug("recorded %s into %s", self.counts, self.path)

    def __enter__(self) -> BagRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------

    def _callback_for(self, topic: str) -> Any:
        def callback(data: bytes) -> None:
            if self._clock == "node":
                stamp = self._node.get_clock().now().nanoseconds
            else:
                stamp = time.time_ns()
            with self._lock:
                if self._closed:
                    return
                first = topic not in self._seen
                self._seen.add(topic)
            # The first message adds the topic with the QoS its publishers offer now.
            self._queue.put((topic, stamp, data, self._offered(topic) if first else None))

        return callback

    def _write_loop(
        self, storage: str, ready: threading.Event, created: list[BaseException]
    ) -> None:
        try:
            writer = BagWriter(self.path, storage=storage, version=8)
        except BaseException as exc:
            created.append(exc)
            ready.set()
            return
        ready.set()
        try:
            self._drain(writer)
            for topic, msgtype in self._types.items():
                if not writer.has_topic(topic):
                    writer.add_topic(topic, msgtype, qos=self._offered(topic))
        except Exception as exc:
            _LOG.error("finishing bag %s failed", self.path, exc_info=True)
            self._error = self._error or f"finishing bag '{self.path}' failed: {exc}"
        finally:
            try:
                writer.close()
            except BagError as exc:
                self._error = self._error or str(exc)

    def _drain(self, writer: BagWriter) -> None:
        """Write queued messages until the close sentinel (None) arrives."""
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is not None:
                continue  # keep draining; close() reports the first error
            topic, stamp, data, offered = item
            try:
                if offered is not None:
                    writer.add_topic(topic, self._types[topic], qos=offered)
                writer.write(topic, stamp, data)
            except Exception as exc:
                _LOG.error("recording %s into %s failed", topic, self.path, exc_info=True)
                self._error = f"recording topic '{topic}' into bag '{self.path}' failed: {exc}"
                continue
            with self._lock:
                self._written[topic] += 1

    def _offered(self, topic: str) -> list[RecordedQos]:
        return [
            recorded_qos(info.qos_profile)
            for info in self._node.get_publishers_info_by_topic(topic)
        ]

    def _qos_for(self, topic: str, qos: QoSProfile | Mapping[str, QoSProfile] | None) -> QoSProfile:
        if isinstance(qos, QoSProfile):
            return qos
        if qos is not None and topic in qos:
            return qos[topic]
        offered = [info.qos_profile for info in self._node.get_publishers_info_by_topic(topic)]
        best_effort = any(p.reliability == ReliabilityPolicy.BEST_EFFORT for p in offered)
        latched = bool(offered) and all(
            p.durability == DurabilityPolicy.TRANSIENT_LOCAL for p in offered
        )
        return QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=DEFAULT_DEPTH,
            reliability=ReliabilityPolicy.BEST_EFFORT
            if best_effort
            else ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
        )
