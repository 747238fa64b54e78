"""Camera map: which ROS image topic feeds which model camera key.

A robot team describes its cameras in a small YAML file (the node's ``camera_map``
parameter). Each top-level key is a *model camera key* (``base_0_rgb`` for π0/π0.5,
a GR00T ``video.*`` key, a layout's camera name such as DROID's
``exterior_image_1_left``) and each value says where the frames come from::

    base_0_rgb:
      topic: /camera/base/image_raw            # required
      transport: raw                           # raw | compressed
      qos: sensor_data                         # sensor_data | reliable
    left_wrist_0_rgb: /camera/wrist/image_raw/compressed   # shorthand: topic only

``transport`` defaults to ``compressed`` when the topic ends in ``/compressed``
(sensor_msgs/CompressedImage, as image_transport names it) and ``raw``
(sensor_msgs/Image) otherwise; ``qos`` defaults to ``sensor_data`` (best effort,
the QoS camera drivers publish with).

The map is read and validated once, when the node starts, so a typo fails loudly
instead of silently sending the model the wrong camera: :func:`load_model_camera_map`
checks a map against the camera keys the node's wire format knows before a server
answers (:mod:`relay_ros.formats`: the π0 family's from the model registry, a
layout's camera names). GR00T keys depend on the embodiment the server runs, so a
GR00T map is checked against the server's ``video_keys`` when it connects (by
:class:`~relay_ros.pipeline.observation.ObservationBuilder`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from relay_ros.formats import FormatError, format_for
from relay_ros.models import get_model
from relay_ros.yaml_files import YamlFileError, load_yaml_file

__all__ = [
    "QOS_VALUES",
    "TRANSPORTS",
    "CameraEntry",
    "CameraMapError",
    "camera_constraints",
    "load_camera_map",
    "load_model_camera_map",
]

logger = logging.getLogger(__name__)

#: Accepted ``transport`` values: sensor_msgs/Image or sensor_msgs/CompressedImage.
TRANSPORTS: tuple[str, ...] = ("raw", "compressed")

#: Accepted ``qos`` values: best-effort sensor data (rclpy ``qos_profile_sensor_data``)
#: or reliable, keep-last depth 1.
QOS_VALUES: tuple[str, ...] = ("sensor_data", "reliable")

_FIELDS: tuple[str, ...] = ("topic", "transport", "qos")


class CameraMapError(ValueError):
    """The camera map is unreadable or invalid; the message names the file/entry."""


@dataclass(frozen=True)
class CameraEntry:
    """One camera of the map.

    Attributes:
        key: Model camera key, e.g. ``"base_0_rgb"`` or ``"video.front"``.
        topic: ROS topic the frames arrive on.
        transport: ``"raw"`` (sensor_msgs/Image) or ``"compressed"``
            (sensor_msgs/CompressedImage).
        qos: ``"sensor_data"`` (best effort) or ``"reliable"``.
    """

    key: str
    topic: str
    transport: str
    qos: str


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice (PyYAML keeps the last)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable key; construct_mapping reports it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def camera_constraints(
    model: str, layout: str | os.PathLike[str] | None = None
) -> tuple[tuple[str, ...] | None, int | None]:
    """Return ``(allowed_keys, max_cameras)`` for ``model`` (and ``layout``) before a
    server answers, as the wire format says.

    π0 family: the registry's camera keys and ``max_cameras``. A layout: its camera
    names. GR00T: ``(None, None)``, any key passes the structural check; the keys
    come with the server's metadata (``video_keys``).

    Raises:
        CameraMapError: ``model`` is not a registered model ID, or a bad layout.
    """
    try:
        return format_for(model, layout).camera_rules(get_model(model))
    except (FormatError, ValueError) as exc:
        raise CameraMapError(str(exc)) from None


def load_model_camera_map(
    path: str | os.PathLike[str], model: str, layout: str | os.PathLike[str] | None = None
) -> list[CameraEntry]:
    """Read and validate the camera map of a node set to ``model`` and ``layout`` (see
    :func:`camera_constraints` and :func:`load_camera_map`)."""
    allowed, max_cameras = camera_constraints(model, layout)
    return load_camera_map(path, allowed_keys=allowed, max_cameras=max_cameras)


def _read_yaml(path: str | os.PathLike[str]) -> Any:
    try:
        return load_yaml_file(path, what="camera map", loader=_UniqueKeyLoader)
    except YamlFileError as exc:
        raise CameraMapError(str(exc)) from None


def load_camera_map(
    path_or_mapping: str | os.PathLike[str] | Mapping[str, Any],
    *,
    allowed_keys: Sequence[str] | None,
    max_cameras: int | None,
) -> list[CameraEntry]:
    """Load and validate a camera map.

    Args:
        path_or_mapping: Path of the YAML file, or the already parsed mapping.
        allowed_keys: Camera keys the model accepts (see :func:`camera_constraints`);
            None skips the key check (GR00T before the server metadata is known).
        max_cameras: Maximum number of cameras, or None for no limit.

    Returns:
        The entries in file order.

    Raises:
        CameraMapError: Unreadable file or invalid YAML (names the file), an empty
            map, or an entry with an unknown model key, a missing/empty/duplicate
            topic, an unknown field or a bad ``transport``/``qos`` value, or more
            cameras than ``max_cameras``. Entry errors name the entry and the
            allowed keys.
    """
    if isinstance(path_or_mapping, Mapping):
        source = "camera map"
        data: Any = path_or_mapping
    else:
        source = f"camera map {os.fspath(path_or_mapping)!r}"
        data = _read_yaml(path_or_mapping)

    allowed = None if allowed_keys is None else tuple(allowed_keys)
    allowed_text = "any" if allowed is None else repr(list(allowed))

    def entry_error(key: Any, problem: str) -> CameraMapError:
        return CameraMapError(
            f"{source}: entry {key!r}: {problem} (allowed camera keys: {allowed_text})"
        )

    if data is None or (isinstance(data, Mapping) and not data):
        raise CameraMapError(
            f"{source} is empty; expected at least one camera key -> {{topic: ...}} "
            f"(allowed camera keys: {allowed_text})"
        )
    if not isinstance(data, Mapping):
        raise CameraMapError(
            f"{source} must be a mapping of camera key -> {{topic: ...}}, got {type(data).__name__}"
        )

    entries: list[CameraEntry] = []
    topics: dict[str, str] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not key:
            raise entry_error(key, "camera key must be a non-empty string")
        if allowed is not None and key not in allowed:
            raise entry_error(key, f"camera key {key!r} is not one of {list(allowed)}")
        fields: Mapping[str, Any]
        if isinstance(value, str):
            fields = {"topic": value}
        elif isinstance(value, Mapping):
            fields = value
        elif value is None:
            raise entry_error(key, "missing topic")
        else:
            raise entry_error(
                key, f"expected a topic string or a mapping with 'topic', got {value!r}"
            )
        unknown = [name for name in fields if name not in _FIELDS]
        if unknown:
            raise entry_error(
                key, f"unknown field {unknown[0]!r}; expected fields: {list(_FIELDS)}"
            )
        if "topic" not in fields or fields["topic"] is None:
            raise entry_error(key, "missing topic")
        topic = fields["topic"]
        if not isinstance(topic, str) or not topic.strip():
            raise entry_error(key, f"topic must be a non-empty string, got {topic!r}")
        if topic != topic.strip() or any(ch.isspace() for ch in topic):
            raise entry_error(key, f"topic {topic!r} contains whitespace")
        if topic in topics:
            raise entry_error(key, f"duplicate topic {topic!r} (also used by {topics[topic]!r})")
        default_transport = "compressed" if topic.endswith("/compressed") else "raw"
        transport = fields.get("transport", default_transport)
        if transport not in TRANSPORTS:
            raise entry_error(key, f"transport {transport!r} is not one of {list(TRANSPORTS)}")
        qos = fields.get("qos", "sensor_data")
        if qos not in QOS_VALUES:
            raise entry_error(key, f"qos {qos!r} is not one of {list(QOS_VALUES)}")
        topics[topic] = key
        entries.append(CameraEntry(key=key, topic=topic, transport=transport, qos=qos))

    if max_cameras is not None and len(entries) > max_cameras:
        extra = entries[max_cameras].key
        raise entry_error(
            extra,
            f"{len(entries)} cameras configured "
            f"({[entry.key for entry in entries]}), more than max_cameras={max_cameras}",
        )
    logger.debug("%s: %d cameras: %s", source, len(entries), entries)
    return entries
