"""Read rosbag2 bags (mcap and sqlite3) without ROS bag tools.

Robot teams record cameras and joint states with ``ros2 bag record`` on Jazzy
(mcap by default) or Humble (sqlite3 by default) and replay them through the
node here. This module wraps ``rosbags.rosbag2.Reader`` so the rest of relay_ros
sees one small API: topics with types, counts and recorded QoS, and the raw CDR
bytes of every message with its bag timestamp, in time order. Every failure is a
:class:`BagError` whose message names the bag path (and topic) and says what was
expected, instead of the assorted ``FileNotFoundError`` / ``ReaderError`` /
``sqlite3`` exceptions underneath.

No rclpy here: the player and recorder add the ROS side.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from rosbags.interfaces import Connection, MessageDefinitionFormat, Qos
from rosbags.rosbag2 import Reader, ReaderError
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

__all__ = [
    "SUPPORTED_STORAGES",
    "BagError",
    "BagMessage",
    "BagReader",
    "MissingTopicsError",
    "PlaybackQos",
    "RecordedQos",
    "TopicInfo",
    "playback_qos",
]

_LOG = logging.getLogger(__name__)

#: Storage identifiers this package reads and writes (rosbag2 ``storage_identifier``).
SUPPORTED_STORAGES: tuple[str, ...] = ("mcap", "sqlite3")

_FILE_STORAGES = {".mcap": "mcap", ".db3": "sqlite3"}

# Multi-file bags are merged in windows of this much bag time (ns) so messages
# come out in time order even if split files overlap.
_MERGE_WINDOW_NS = 1_000_000_000

# Depth used when the recorded history carries no usable depth (Humble records
# history UNKNOWN with depth 0, since DDS discovery does not report it).
DEFAULT_PLAYBACK_DEPTH = 10


class BagError(ValueError):
    """A bag cannot be read or written; the message names the path and the problem."""


class MissingTopicsError(BagError):
    """A bag lacks topics that were asked for.

    Attributes:
        path: The bag path.
        missing: The requested topics that the bag does not have (sorted).
        available: All topics the bag has (sorted).
    """

    def __init__(self, path: Path, missing: Sequence[str], available: Sequence[str]) -> None:
        self.path = path
        self.missing = sorted(missing)
        self.available = sorted(available)
        super().__init__(
            f"bag '{path}' has no topic {self.missing}; its topics are {self.available}"
        )


@dataclass(frozen=True)
class RecordedQos:
    """One QoS profile offered by a recorded publisher (``offered_qos_profiles``).

    Policy values are lower-case rmw names: reliability ``reliable`` |
    ``best_effort`` | ``system_default`` | ``best_available`` | ``unknown``;
    durability ``volatile`` | ``transient_local`` | ``system_default`` |
    ``best_available`` | ``unknown``; history ``keep_last`` | ``keep_all`` |
    ``system_default`` | ``unknown``. Durations are nanoseconds (0 = not set).
    """

    history: str = "keep_last"
    depth: int = DEFAULT_PLAYBACK_DEPTH
    reliability: str = "reliable"
    durability: str = "volatile"
    deadline_ns: int = 0
    lifespan_ns: int = 0
    liveliness: str = "automatic"
    liveliness_lease_duration_ns: int = 0
    avoid_ros_namespace_conventions: bool = False

    @classmethod
    def from_rosbags(cls, qos: Qos) -> RecordedQos:
        """Convert a ``rosbags.interfaces.Qos`` (parsed from either metadata format)."""
        return cls(
            history=qos.history.name.lower(),
            depth=int(qos.depth),
            reliability=qos.reliability.name.lower(),
            durability=qos.durability.name.lower(),
            deadline_ns=_qos_time_ns(qos.deadline),
            lifespan_ns=_qos_time_ns(qos.lifespan),
            liveliness=qos.liveliness.name.lower(),
            liveliness_lease_duration_ns=_qos_time_ns(qos.liveliness_lease_duration),
            avoid_ros_namespace_conventions=bool(qos.avoid_ros_namespace_conventions),
        )

    def to_rosbags(self) -> Qos:
        """Convert to ``rosbags.interfaces.Qos`` for the writer."""
        from rosbags.interfaces import (
            QosDurability,
            QosHistory,
            QosLiveliness,
            QosReliability,
            QosTime,
        )

        def enum(kind: Any, value: str) -> Any:
            try:
                return kind[value.upper()]
            except KeyError:
                names = [m.lower() for m in kind.__members__]
                raise BagError(
                    f"QoS value '{value}' is not one of {names} for {kind.__name__}"
                ) from None

        return Qos(
            enum(QosHistory, self.history),
            self.depth,
            enum(QosReliability, self.reliability),
            enum(QosDurability, self.durability),
            QosTime(*divmod(self.deadline_ns, 1_000_000_000)),
            QosTime(*divmod(self.lifespan_ns, 1_000_000_000)),
            enum(QosLiveliness, self.liveliness),
            QosTime(*divmod(self.liveliness_lease_duration_ns, 1_000_000_000)),
            self.avoid_ros_namespace_conventions,
        )


@dataclass(frozen=True)
class PlaybackQos:
    """The QoS a player offers for one topic, derived from the recorded profiles.

    ``reliability`` is ``reliable`` | ``best_effort``; ``durability`` is
    ``volatile`` | ``transient_local``; ``history`` is ``keep_last`` | ``keep_all``;
    ``depth`` is the queue depth (used with ``keep_last``).
    """

    reliability: str = "reliable"
    durability: str = "volatile"
    history: str = "keep_last"
    depth: int = DEFAULT_PLAYBACK_DEPTH


def playback_qos(profiles: Sequence[RecordedQos]) -> PlaybackQos:
    """Choose the QoS to offer when replaying a topic.

    Reliability and durability adapt to the recorded offers the way ``ros2 bag
    play`` does: best effort if any recorded publisher offered best effort, else
    reliable; transient local only if every one offered transient local. History
    goes further than ``ros2 bag play`` (which always offers keep_last 10): keep_all
    if every one kept all, otherwise keep_last with the largest recorded depth
    (``DEFAULT_PLAYBACK_DEPTH`` when none was recorded, e.g. Humble's
    ``history: 3, depth: 0``). No profiles (old bags) gives reliable, volatile,
    keep_last 10.
    """
    if not profiles:
        return PlaybackQos()
    reliability = (
        "best_effort" if any(p.reliability == "best_effort" for p in profiles) else "reliable"
    )
    durability = (
        "transient_local"
        if all(p.durability == "transient_local" for p in profiles)
        else "volatile"
    )
    if all(p.history == "keep_all" for p in profiles):
        return PlaybackQos(reliability, durability, "keep_all", DEFAULT_PLAYBACK_DEPTH)
    depth = max((p.depth for p in profiles if p.history == "keep_last" and p.depth > 0), default=0)
    return PlaybackQos(reliability, durability, "keep_last", depth or DEFAULT_PLAYBACK_DEPTH)


@dataclass(frozen=True)
class TopicInfo:
    """One topic of a bag.

    Attributes:
        name: Topic name, e.g. ``/joint_states``.
        msgtype: ROS 2 type name, e.g. ``sensor_msgs/msg/JointState``.
        count: Number of messages recorded.
        qos: The QoS profiles the recorded publishers offered (may be empty).
    """

    name: str
    msgtype: str
    count: int
    qos: tuple[RecordedQos, ...]

    @property
    def playback_qos(self) -> PlaybackQos:
        """The QoS a player should offer for this topic (see :func:`playback_qos`)."""
        return playback_qos(self.qos)


class BagMessage(NamedTuple):
    """One recorded message: topic, type, bag timestamp in ns, raw CDR bytes."""

    topic: str
    msgtype: str
    timestamp_ns: int
    data: bytes


def _describe(exc: BaseException) -> str:
    """The rosbags/sqlite3 message, or the exception type when the message is bare."""
    if isinstance(exc, (ReaderError, sqlite3.Error, OSError)) and str(exc):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _qos_time_ns(value: Any) -> int:
    return int(value.sec) * 1_000_000_000 + int(value.nsec)


class BagReader:
    """An open rosbag2 bag (directory with ``metadata.yaml``, or one ``.mcap``/``.db3`` file).

    The bag is opened by the constructor and closed by :meth:`close` or the
    context manager. Not thread-safe: use one reader per thread.

    Raises:
        BagError: The path does not exist, is not a bag, uses an unsupported
            storage or has corrupt metadata or data.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.storage, self.version, self._file_count = _inspect(self.path)
        try:
            self._reader = Reader(self.path)
            self._reader.open()
        except Exception as exc:  # rosbags parsers raise many types on corrupt input
            raise BagError(f"bag '{self.path}' is corrupt or unreadable: {_describe(exc)}") from exc
        self._typestore: Any = None
        self._topics = self._collect_topics()
        _LOG.debug("opened bag %s (%s, version %s)", self.path, self.storage, self.version)

    # -- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the bag. Idempotent."""
        if self._reader.is_open:
            self._reader.close()

    def __enter__(self) -> BagReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if not self._reader.is_open:
            raise BagError(f"bag '{self.path}' is closed")

    # -- metadata ---------------------------------------------------------------------

    @property
    def topics(self) -> dict[str, TopicInfo]:
        """Topics by name, sorted by name."""
        return dict(self._topics)

    @property
    def start_ns(self) -> int:
        """Timestamp (ns) of the earliest message; 0 for an empty bag."""
        self._check_open()
        return self._reader.start_time if self._reader.message_count else 0

    @property
    def end_ns(self) -> int:
        """Timestamp (ns) of the latest message; 0 for an empty bag."""
        self._check_open()
        return self._reader.end_time - 1 if self._reader.message_count else 0

    @property
    def duration_s(self) -> float:
        """Seconds between the first and the last message."""
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def message_count(self) -> int:
        """Total number of messages in the bag."""
        self._check_open()
        return self._reader.message_count

    @property
    def ros_distro(self) -> str | None:
        """The ``ros_distro`` recorded in metadata (version 8+), else None."""
        self._check_open()
        return self._reader.ros_distro

    def require_topics(self, topics: Iterable[str]) -> None:
        """Raise :class:`MissingTopicsError` naming every topic the bag lacks."""
        missing = [t for t in topics if t not in self._topics]
        if missing:
            raise MissingTopicsError(self.path, missing, list(self._topics))

    def _collect_topics(self) -> dict[str, TopicInfo]:
        topics: dict[str, TopicInfo] = {}
        for name, info in sorted(self._reader.topics.items()):
            types = {c.msgtype for c in info.connections}
            if len(types) != 1:
                raise BagError(
                    f"bag '{self.path}' records topic '{name}' with several types "
                    f"{sorted(types)}; expected one type per topic"
                )
            qos: list[RecordedQos] = []
            for conn in info.connections:
                offered = getattr(conn.ext, "offered_qos_profiles", None) or []
                qos.extend(RecordedQos.from_rosbags(q) for q in offered)
            topics[name] = TopicInfo(name, types.pop(), int(info.msgcount), tuple(qos))
        return topics

    # -- messages ---------------------------------------------------------------------

    def messages(
        self,
        topics: Iterable[str] | None = None,
        *,
        start_ns: int | None = None,
        stop_ns: int | None = None,
    ) -> Iterator[BagMessage]:
        """Yield recorded messages in bag-time order (ties keep storage order).

        Args:
            topics: Only these topics (all when None). Unknown topics raise
                :class:`MissingTopicsError`.
            start_ns: Only messages at or after this bag timestamp (ns).
            stop_ns: Only messages before this bag timestamp (ns).

        Raises:
            BagError: The data is corrupt (raised while iterating).
        """
        self._check_open()
        conns = self._connections(topics)
        return self._iterate(conns, start_ns, stop_ns)

    def _iterate(
        self, conns: list[Connection], start_ns: int | None, stop_ns: int | None
    ) -> Iterator[BagMessage]:
        if not conns:
            return
        try:
            if self._file_count <= 1:
                for conn, stamp, data in self._reader.messages(conns, start_ns, stop_ns):
                    yield BagMessage(conn.topic, conn.msgtype, stamp, bytes(data))
            else:
                yield from self._merged(conns, start_ns, stop_ns)
        except BagError:
            raise
        except Exception as exc:  # rosbags parsers raise many types on corrupt data
            raise BagError(f"bag '{self.path}' is corrupt or unreadable: {_describe(exc)}") from exc

    def _merged(
        self, conns: list[Connection], start_ns: int | None, stop_ns: int | None
    ) -> Iterator[BagMessage]:
        # Split bags are read file after file by rosbags; windows of bag time,
        # sorted stably, give global time order with bounded memory.
        lo = max(self._reader.start_time, start_ns if start_ns is not None else 0)
        hi = self._reader.end_time if stop_ns is None else min(stop_ns, self._reader.end_time)
        while lo < hi:
            upper = min(lo + _MERGE_WINDOW_NS, hi)
            window = [
                BagMessage(c.topic, c.msgtype, t, bytes(d))
                for c, t, d in self._reader.messages(conns, lo, upper)
            ]
            window.sort(key=lambda m: m.timestamp_ns)
            yield from window
            lo = upper

    def _connections(self, topics: Iterable[str] | None) -> list[Connection]:
        if topics is None:
            return list(self._reader.connections)
        wanted = list(topics)
        self.require_topics(wanted)
        return [c for c in self._reader.connections if c.topic in set(wanted)]

    def deserialize(self, message: BagMessage) -> Any:
        """Decode a message into a rosbags dataclass (Jazzy typestore).

        Types missing from the Jazzy store are registered from the bag's own
        message definitions (``.msg`` format).

        Raises:
            BagError: The type is unknown or the bytes do not decode.
        """
        store = self._store_for(message.msgtype, message.topic)
        try:
            return store.deserialize_cdr(message.data, message.msgtype)
        except Exception as exc:
            raise BagError(
                f"message on topic '{message.topic}' of bag '{self.path}' does not decode "
                f"as {message.msgtype}: {exc}"
            ) from exc

    def _store_for(self, msgtype: str, topic: str) -> Any:
        if self._typestore is None:
            self._typestore = get_typestore(Stores.ROS2_JAZZY)
        store = self._typestore
        if msgtype in store.types:
            return store
        for conn in self._reader.connections:
            if conn.msgtype == msgtype and conn.msgdef.format == MessageDefinitionFormat.MSG:
                store.register(get_types_from_msg(conn.msgdef.data, msgtype))
                return store
        raise BagError(
            f"message type '{msgtype}' of topic '{topic}' is not in the Jazzy typestore "
            f"and bag '{self.path}' carries no .msg definition for it"
        )


def _inspect(path: Path) -> tuple[str, int | None, int]:
    """Validate the path and return (storage, metadata version or None, file count)."""
    if not path.exists():
        raise BagError(f"bag path '{path}' does not exist")
    if path.is_file():
        storage = _FILE_STORAGES.get(path.suffix)
        if storage is None:
            raise BagError(
                f"'{path}' is not a rosbag2 bag: expected a bag directory with "
                f"metadata.yaml, or a .mcap or .db3 file"
            )
        return storage, None, 1
    meta_path = path / "metadata.yaml"
    if not meta_path.is_file():
        raise BagError(f"'{path}' is not a rosbag2 bag: it has no metadata.yaml")
    try:
        doc = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
        info = doc["rosbag2_bagfile_information"]
        storage = str(info["storage_identifier"])
        version = int(info["version"])
        files = list(info["relative_file_paths"])
    except (OSError, UnicodeDecodeError, yaml.YAMLError, TypeError, KeyError, ValueError) as exc:
        detail = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise BagError(f"bag '{path}' has corrupt metadata.yaml: {detail}") from exc
    if storage not in SUPPORTED_STORAGES:
        raise BagError(
            f"bag '{path}' uses storage '{storage}'; supported storages are "
            f"{list(SUPPORTED_STORAGES)}"
        )
    return storage, version, len(files)
