"""Play a rosbag2 bag into ROS 2: raw CDR bytes, recorded timing, recorded QoS, /clock.

``ros2 bag play`` is not available here (and not on every robot laptop), so this
player does the part relay_ros needs: it reads a bag with
:class:`~relay_ros.bag.reader.BagReader` and publishes each message's recorded
CDR bytes unchanged through an rclpy publisher of the recorded type, at the
recorded bag times scaled by ``rate``. It publishes ``/clock``
(``rosgraph_msgs/msg/Clock``) at bag time, so nodes started with
``use_sim_time:=true`` run on the bag's clock, and offers per topic the QoS the
recorded publishers offered (see :func:`~relay_ros.bag.reader.playback_qos`),
whether the metadata is Humble's YAML string or Jazzy's structured form.

Playback runs on its own thread and never spins an executor, so the caller's
executor keeps serving its nodes. When that thread does not run for longer than
:data:`MAX_STALL_S` (a loaded machine), the rest of the bag plays that much later
instead of bag time leaping: ``/clock`` never steps by more than about
``MAX_STALL_S * rate``, which a node on sim time would take for a jump of its clock
(policy_node holds and restarts its schedule on one of a second). Messages go out in
bag-time order (ties in storage order), so two plays of one bag publish the same
sequence.
CDR bytes of the sensor message types are identical between Humble and Jazzy,
so Humble-recorded bags play unchanged.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rclpy.context import Context
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from .reader import BagError, BagReader, PlaybackQos

__all__ = [
    "CLOCK_TOPIC",
    "MAX_STALL_S",
    "BagPlayer",
    "PlaybackProgress",
    "message_class",
    "to_qos_profile",
]

_LOG = logging.getLogger(__name__)

#: Topic the simulated clock is published on (what rclpy's TimeSource subscribes to).
CLOCK_TOPIC = "/clock"
#: Longest the playback thread may not run (wall seconds) before the rest of the bag
#: is played that much later (see the module docstring).
MAX_STALL_S = 0.1


def message_class(msgtype: str) -> type[Any]:
    """Import the rclpy message class for a ROS 2 type name.

    Args:
        msgtype: ``pkg/msg/Type`` (``pkg/Type`` is accepted too).

    Raises:
        BagError: The name is malformed or the package is not installed.
    """
    parts = msgtype.split("/")
    if len(parts) == 2:
        parts = [parts[0], "msg", parts[1]]
    if len(parts) != 3 or not all(parts) or parts[1] != "msg":
        raise BagError(f"message type '{msgtype}' is not of the form 'pkg/msg/Type'")
    pkg, _, name = parts
    try:
        module = importlib.import_module(f"{pkg}.msg")
        return getattr(module, name)
    except (ImportError, AttributeError) as exc:
        raise BagError(
            f"message type '{msgtype}' is not available in this ROS installation ({exc}); "
            f"install the '{pkg}' package"
        ) from exc


def to_qos_profile(qos: PlaybackQos) -> QoSProfile:
    """Turn a :class:`~relay_ros.bag.reader.PlaybackQos` into an rclpy ``QoSProfile``."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_ALL if qos.history == "keep_all" else HistoryPolicy.KEEP_LAST,
        depth=qos.depth,
        reliability=(
            ReliabilityPolicy.BEST_EFFORT
            if qos.reliability == "best_effort"
            else ReliabilityPolicy.RELIABLE
        ),
        durability=(
            DurabilityPolicy.TRANSIENT_LOCAL
            if qos.durability == "transient_local"
            else DurabilityPolicy.VOLATILE
        ),
    )


@dataclass(frozen=True)
class PlaybackProgress:
    """A snapshot of a player's state.

    Attributes:
        played: Messages published so far, per bag topic.
        total: Messages to publish, per bag topic.
        bag_time_ns: Bag time reached (last /clock or message time), ns; 0 before start.
        started: ``start()`` was called.
        done: Playback has ended (all played, stopped, or failed).
        stopped: Ended early by ``stop()``.
        error: Why playback failed, or None.
    """

    played: Mapping[str, int] = field(default_factory=dict)
    total: Mapping[str, int] = field(default_factory=dict)
    bag_time_ns: int = 0
    started: bool = False
    done: bool = False
    stopped: bool = False
    error: str | None = None

    @property
    def fraction(self) -> float:
        """Share of messages published, 0..1 (1 for an empty selection)."""
        total = sum(self.total.values())
        return sum(self.played.values()) / total if total else 1.0


class BagPlayer:
    """Publish a bag's messages through rclpy with recorded timing and /clock.

    Args:
        node_or_context: A node to create the publishers on, or an rclpy
            ``Context`` in which the player creates (and later destroys) its own
            node named ``node_name``. Publishing needs no spinning.
        bag_path: The bag (directory with metadata.yaml, or a .mcap/.db3 file).
        rate: Playback speed factor (2.0 = twice as fast); finite and > 0.
        topics: Bag topics to play (all when None); unknown topics raise
            :class:`~relay_ros.bag.reader.MissingTopicsError`.
        publish_clock: Publish ``/clock`` at bag time.
        clock_hz: /clock publications per second of wall time while playing.
        remap: Bag topic -> topic to publish on (others keep their name).
        qos_overrides: Bag topic -> rclpy ``QoSProfile`` to offer instead of the
            recorded QoS.
        node_name: Name of the node created when given a context.

    Publishers are created by the constructor, so subscribers can match before
    :meth:`start` (see :meth:`wait_for_subscribers`). Use :meth:`close` or the
    context manager to stop playback and release publishers.

    Raises:
        BagError: Unreadable bag, unknown topic or type, or a bad option.
    """

    def __init__(
        self,
        node_or_context: Node | Context,
        bag_path: str | os.PathLike[str],
        *,
        rate: float = 1.0,
        topics: Iterable[str] | None = None,
        publish_clock: bool = True,
        clock_hz: float = 100.0,
        remap: Mapping[str, str] | None = None,
        qos_overrides: Mapping[str, QoSProfile] | None = None,
        node_name: str = "relay_bag_player",
    ) -> None:
        if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            raise BagError(f"playback rate {rate!r} is not a finite number > 0")
        if not (isinstance(clock_hz, (int, float)) and math.isfinite(clock_hz) and clock_hz > 0):
            raise BagError(f"clock_hz {clock_hz!r} is not a finite number > 0")
        self.bag_path = Path(bag_path)
        self.rate = float(rate)
        self.publish_clock = publish_clock
        self.clock_hz = float(clock_hz)
        remap = dict(remap or {})
        overrides = dict(qos_overrides or {})

        with BagReader(self.bag_path) as reader:
            wanted = list(reader.topics) if topics is None else list(dict.fromkeys(topics))
            reader.require_topics(wanted)
            for name in list(remap) + list(overrides):
                if name not in wanted:
                    raise BagError(
                        f"topic '{name}' in remap/qos_overrides is not among the played "
                        f"topics {sorted(wanted)} of bag '{self.bag_path}'"
                    )
            infos = {name: reader.topics[name] for name in wanted}
            self.start_ns = reader.start_ns
            self.end_ns = reader.end_ns
        self.topics: tuple[str, ...] = tuple(sorted(infos))
        classes = {name: message_class(info.msgtype) for name, info in infos.items()}

        if isinstance(node_or_context, Node):
            self._node = node_or_context
            self._owns_node = False
        elif isinstance(node_or_context, Context):
            import rclpy

            self._node = rclpy.create_node(node_name, context=node_or_context)
            self._owns_node = True
        else:
            raise BagError(
                f"node_or_context is a {type(node_or_context).__name__}; "
                f"expected an rclpy Node or Context"
            )

        self._publishers: dict[str, Any] = {}
        self.qos: dict[str, QoSProfile] = {}
        try:
            for name in self.topics:
                profile = overrides.get(name) or to_qos_profile(infos[name].playback_qos)
                self.qos[name] = profile
                self._publishers[name] = self._node.create_publisher(
                    classes[name], remap.get(name, name), profile
                )
            self._clock_pub: Any = None
            if publish_clock:
                from rosgraph_msgs.msg import Clock

                self._clock_cls = Clock
                # Reliable matches rclpy's best-effort TimeSource and reliable listeners.
                self._clock_pub = self._node.create_publisher(
                    Clock,
                    CLOCK_TOPIC,
                    QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE),
                )
        except BaseException:
            self._destroy()
            raise

        self.output_topics: dict[str, str] = {t: remap.get(t, t) for t in self.topics}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._finished = threading.Event()
        self._thread: threading.Thread | None = None
        self._played = dict.fromkeys(self.topics, 0)
        self._total = {name: infos[name].count for name in self.topics}
        self._bag_time_ns = 0
        self._error: str | None = None
        self._stopped_early = False
        self._closed = False
        # Playback-thread state: wall time of bag start, next /clock tick, last /clock.
        self._wall0 = 0.0
        self._next_clock = 0.0
        self._expect = 0.0  # when the playback thread should next run
        self._last_clock = -1

    # -- control ----------------------------------------------------------------------

    @property
    def node(self) -> Node:
        """The node the publishers live on."""
        return self._node

    def wait_for_subscribers(self, timeout: float, topics: Iterable[str] | None = None) -> bool:
        """Wait until each given bag topic (default: all played) has a subscriber.

        Args:
            timeout: Seconds of wall time to wait at most.
            topics: Bag topics to check; ``"/clock"`` checks the clock publisher.

        Returns:
            True if all have at least one matched subscription in time.
        """
        pubs = []
        for name in self.topics if topics is None else topics:
            if name == CLOCK_TOPIC and self._clock_pub is not None:
                pubs.append(self._clock_pub)
            elif name in self._publishers:
                pubs.append(self._publishers[name])
            else:
                raise BagError(
                    f"topic '{name}' is not played; played topics are {list(self.topics)}"
                )
        deadline = time.monotonic() + timeout
        while True:
            if all(p.get_subscription_count() > 0 for p in pubs):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def start(self) -> None:
        """Start playback on a background thread (once).

        Raises:
            BagError: Already started or closed.
        """
        with self._lock:
            if self._closed:
                raise BagError(f"player for bag '{self.bag_path}' is closed")
            if self._thread is not None:
                raise BagError(f"player for bag '{self.bag_path}' was already started")
            self._thread = threading.Thread(target=self._run, name="relay-bag-player", daemon=True)
            self._thread.start()

    def play(self) -> PlaybackProgress:
        """Start playback and block until it ends (:meth:`stop` from another thread ends it).

        Raises:
            BagError: Already started, closed, or the bag failed while playing.
        """
        self.start()
        self.wait()
        return self.progress

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for playback to end.

        Args:
            timeout: Seconds to wait at most (None: no limit).

        Returns:
            True when playback has ended (finished or stopped), False on timeout.

        Raises:
            BagError: Playback failed; the message says why.
        """
        if not self._finished.wait(timeout):
            return False
        if self._error is not None:
            raise BagError(self._error)
        return True

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop playback (if running) and wait up to ``timeout`` s for the thread."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def close(self) -> None:
        """Stop playback and destroy the publishers (and the owned node). Idempotent."""
        self.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._destroy()

    def __enter__(self) -> BagPlayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def progress(self) -> PlaybackProgress:
        """A consistent snapshot of what has been played."""
        with self._lock:
            return PlaybackProgress(
                played=dict(self._played),
                total=dict(self._total),
                bag_time_ns=self._bag_time_ns,
                started=self._thread is not None,
                done=self._finished.is_set(),
                stopped=self._stopped_early,
                error=self._error,
            )

    # -- playback thread --------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._play()
        except Exception as exc:  # reported through progress.error and wait()
            _LOG.error("playback of %s failed", self.bag_path, exc_info=True)
            with self._lock:
                self._error = (
                    str(exc)
                    if isinstance(exc, BagError)
                    else f"playback of bag '{self.bag_path}' failed: {exc!r}"
                )
        finally:
            self._finished.set()

    def _play(self) -> None:
        # The reader is opened here: sqlite3 connections belong to their thread.
        with BagReader(self.bag_path) as reader:
            self._wall0 = time.monotonic()
            self._expect = self._wall0
            self._next_clock = self._wall0
            self._last_clock = -1
            if self._clock_pub is not None:
                self._publish_clock(self.start_ns)
                self._next_clock = self._wall0 + 1.0 / self.clock_hz
            for message in reader.messages(self.topics):
                if not self._wait_until(message.timestamp_ns):
                    return
                self._publishers[message.topic].publish(message.data)
                with self._lock:
                    self._played[message.topic] += 1
                    self._bag_time_ns = max(self._bag_time_ns, message.timestamp_ns)
            # A topic subset may end before the bag does: keep bag time running to the end.
            if not self._wait_until(self.end_ns):
                return
            if self._clock_pub is not None:
                self._publish_clock(self.end_ns)
        _LOG.info("played %s: %s", self.bag_path, self._played)

    def _wait_until(self, stamp_ns: int) -> bool:
        """Sleep until bag time ``stamp_ns`` (scaled by rate), ticking /clock meanwhile.

        /clock follows wall time but never passes ``stamp_ns``, the next thing to
        publish. Returns False if :meth:`stop` was called.
        """
        period = 1.0 / self.clock_hz
        while not self._stop.is_set():
            now = time.monotonic()
            stalled = now - self._expect
            if stalled > MAX_STALL_S:  # this thread did not run: play the rest later
                self._wall0 += stalled
                self._next_clock = min(self._next_clock + stalled, now)
            target = self._wall0 + (stamp_ns - self.start_ns) / 1e9 / self.rate
            if self._clock_pub is not None and now >= self._next_clock:
                bag_now = self.start_ns + int((now - self._wall0) * self.rate * 1e9)
                self._publish_clock(min(bag_now, stamp_ns))
                self._next_clock = max(self._next_clock + period, now)
            if now >= target:
                self._expect = now  # publishing follows at once
                return True
            wake = min(target, self._next_clock) if self._clock_pub is not None else target
            self._expect = max(wake, now)
            self._stop.wait(max(wake - now, 0.0))
        _LOG.info("playback of %s stopped", self.bag_path)
        with self._lock:
            self._stopped_early = True
        return False

    def _publish_clock(self, stamp_ns: int) -> None:
        """Publish /clock at ``stamp_ns`` unless that would go backwards or repeat."""
        if stamp_ns <= self._last_clock:
            return
        self._last_clock = stamp_ns
        msg = self._clock_cls()
        msg.clock.sec = stamp_ns // 1_000_000_000
        msg.clock.nanosec = stamp_ns % 1_000_000_000
        self._clock_pub.publish(msg)
        with self._lock:
            self._bag_time_ns = max(self._bag_time_ns, stamp_ns)

    def _destroy(self) -> None:
        for pub in list(self._publishers.values()):
            self._node.destroy_publisher(pub)
        self._publishers.clear()
        clock_pub = getattr(self, "_clock_pub", None)
        if clock_pub is not None:
            self._node.destroy_publisher(clock_pub)
            self._clock_pub = None
        if self._owns_node:
            self._node.destroy_node()
