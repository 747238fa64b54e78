"""Write rosbag2 bags (mcap or sqlite3, metadata version 8) from raw CDR bytes.

Version 8 is the newest metadata format Humble's rosbag2 reads, and Jazzy reads
it too, so bags written here (fixtures, the node's recorded outputs) open with
``ros2 bag info/play`` on both distributions. Message definitions and type hashes
come from the rosbags typestore of the chosen distribution (Jazzy by default;
the sensor, trajectory and diagnostic types are identical on Humble).

No rclpy here; :mod:`relay_ros.bag.recorder` feeds this from subscriptions.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from rosbags.interfaces import Connection
from rosbags.rosbag2 import StoragePlugin, Writer, WriterError
from rosbags.typesys import Stores, get_typestore

from .reader import SUPPORTED_STORAGES, BagError, RecordedQos

__all__ = ["SUPPORTED_DISTROS", "BagWriter"]

_LOG = logging.getLogger(__name__)

#: Typestores the writer can take message definitions from.
SUPPORTED_DISTROS: dict[str, Stores] = {"jazzy": Stores.ROS2_JAZZY, "humble": Stores.ROS2_HUMBLE}

_PLUGINS = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}


class BagWriter:
    """A new rosbag2 bag directory, written from raw CDR bytes.

    Args:
        path: Directory to create; must not exist (bags are never overwritten).
        storage: ``"mcap"`` (Jazzy's default) or ``"sqlite3"`` (Humble's default).
        version: Metadata version, 8 (readable by Humble and Jazzy) or 9.
        distro: Typestore for message definitions, ``"jazzy"`` or ``"humble"``.

    The bag is opened by the constructor; :meth:`close` (or leaving the context
    manager) writes the index and ``metadata.yaml``. Leaving the context manager
    with an exception still closes the bag so the messages written so far are
    kept. Use a writer from the thread that created it: sqlite3 connections are
    bound to their thread (the recorder gives its writer a thread of its own).

    Raises:
        BagError: Bad storage/version/distro, or the path exists.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        storage: str = "mcap",
        version: Literal[8, 9] = 8,
        distro: str = "jazzy",
    ) -> None:
        self.path = Path(path)
        if storage not in SUPPORTED_STORAGES:
            raise BagError(
                f"storage '{storage}' is not one of {list(SUPPORTED_STORAGES)} (bag '{self.path}')"
            )
        if version not in (8, 9):
            raise BagError(f"bag version {version} is not one of [8, 9] (bag '{self.path}')")
        if distro not in SUPPORTED_DISTROS:
            raise BagError(f"distro '{distro}' is not one of {list(SUPPORTED_DISTROS)}")
        if self.path.exists():
            raise BagError(f"bag path '{self.path}' exists already; bags are never overwritten")
        self.storage = storage
        self.version = version
        self._typestore: Any = get_typestore(SUPPORTED_DISTROS[distro])
        self._lock = threading.Lock()
        self._connections: dict[str, Connection] = {}
        self._counts: dict[str, int] = {}
        try:
            self._writer: Writer | None = Writer(
                self.path, version=version, storage_plugin=_PLUGINS[storage]
            )
            self._writer.open()
        except (WriterError, OSError) as exc:
            raise BagError(f"cannot create bag '{self.path}': {exc}") from exc

    @property
    def typestore(self) -> Any:
        """The rosbags typestore used for definitions (also handy for serializing)."""
        return self._typestore

    @property
    def counts(self) -> dict[str, int]:
        """Messages written so far, per topic."""
        with self._lock:
            return dict(self._counts)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._writer is None

    def add_topic(self, topic: str, msgtype: str, *, qos: Sequence[RecordedQos] = ()) -> None:
        """Declare a topic before writing to it.

        Args:
            topic: Topic name, e.g. ``/joint_states``.
            msgtype: ROS 2 type, e.g. ``sensor_msgs/msg/JointState``.
            qos: Offered QoS profiles to store in ``offered_qos_profiles``.

        Raises:
            BagError: The topic exists already, the type is unknown to the
                typestore, or the bag is closed.
        """
        with self._lock:
            writer = self._open_writer()
            if topic in self._connections:
                raise BagError(f"topic '{topic}' was already added to bag '{self.path}'")
            if msgtype not in self._typestore.types:
                raise BagError(
                    f"message type '{msgtype}' of topic '{topic}' is not in the rosbags "
                    f"typestore; expected a standard ROS 2 type such as 'sensor_msgs/msg/Image'"
                )
            try:
                conn = writer.add_connection(
                    topic,
                    msgtype,
                    typestore=self._typestore,
                    offered_qos_profiles=[q.to_rosbags() for q in qos],
                )
            except WriterError as exc:
                raise BagError(f"cannot add topic '{topic}' to bag '{self.path}': {exc}") from exc
            self._connections[topic] = conn
            self._counts[topic] = 0

    def has_topic(self, topic: str) -> bool:
        """Whether ``topic`` was added."""
        with self._lock:
            return topic in self._connections

    def write(self, topic: str, timestamp_ns: int, data: bytes | bytearray | memoryview) -> None:
        """Append one message.

        Args:
            topic: A topic added with :meth:`add_topic`.
            timestamp_ns: Bag timestamp in nanoseconds (receive time by convention).
            data: Raw CDR bytes of a message of the topic's type.

        Raises:
            BagError: Unknown topic or closed bag.
        """
        with self._lock:
            writer = self._open_writer()
            conn = self._connections.get(topic)
            if conn is None:
                raise BagError(
                    f"topic '{topic}' was not added to bag '{self.path}'; "
                    f"added topics are {sorted(self._connections)}"
                )
            writer.write(conn, int(timestamp_ns), bytes(data))
            self._counts[topic] += 1

    def serialize(self, message: Any, msgtype: str) -> bytes:
        """Serialize a rosbags message object to CDR bytes with this writer's typestore."""
        return bytes(self._typestore.serialize_cdr(message, msgtype))

    def close(self) -> None:
        """Write the index and metadata.yaml. Idempotent."""
        with self._lock:
            writer, self._writer = self._writer, None
            if writer is None:
                return
            try:
                writer.close()
            except (WriterError, OSError) as exc:
                raise BagError(f"cannot finish bag '{self.path}': {exc}") from exc
        _LOG.debug("closed bag %s with %s", self.path, self._counts)

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_writer(self) -> Writer:
        if self._writer is None:
            raise BagError(f"bag '{self.path}' is closed")
        return self._writer
