"""rosbag2 support without ROS bag tools: read, write, play and record bags.

``reader``/``writer`` are plain Python over ``rosbags`` (mcap and sqlite3,
metadata version 8 so Humble reads what we write). ``player`` and ``recorder``
add rclpy and are imported lazily so this package stays importable without ROS.
"""

from __future__ import annotations

from .reader import (
    SUPPORTED_STORAGES,
    BagError,
    BagMessage,
    BagReader,
    MissingTopicsError,
    PlaybackQos,
    RecordedQos,
    TopicInfo,
    playback_qos,
)
from .writer import BagWriter

__all__ = [
    "SUPPORTED_STORAGES",
    "BagError",
    "BagMessage",
    "BagReader",
    "BagWriter",
    "MissingTopicsError",
    "PlaybackQos",
    "RecordedQos",
    "TopicInfo",
    "playback_qos",
]
