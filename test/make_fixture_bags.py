"""Generate the fixture bags for the bag and replay tests from synthetic data.

What a robot team records with ``ros2 bag record``, shrunk to a few seconds:

- ``/camera/base/image_raw``: ``sensor_msgs/msg/Image`` rgb8 (320x240 by default), 30 Hz.
- ``/camera/wrist/image_raw/compressed``: ``sensor_msgs/msg/CompressedImage`` jpeg, 30 Hz.
- ``/joint_states``: ``sensor_msgs/msg/JointState``, 100 Hz with +-2 ms timing jitter,
  joints ``joint1``..``joint6`` + ``gripper_joint`` moving smoothly (sines).
- A camera dropout: both cameras are silent for ``dropout`` (default 2.5-3.5 s), the
  joint states keep coming.

One bag per storage format (mcap like Jazzy, sqlite3 like Humble), metadata
version 8, every topic offered reliable/volatile/keep_last. Bag time starts at
``START_NS``; a message's bag timestamp is its receive time, its ``header.stamp``
is the capture time (``CAMERA_LATENCY_NS`` / ``JOINT_LATENCY_NS`` earlier).
Frames come from :class:`relay_ros.sim.scene.SceneRenderer` (cameras ``base`` and
``wrist``). Everything is deterministic for a given ``seed``.

Usage: ``python test/make_fixture_bags.py OUT_DIR [--seconds 6]`` or
``make_bags(out_dir)`` from tests (generate into a tmp dir; binaries are not committed).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from relay_ros.bag.reader import RecordedQos
from relay_ros.bag.writer import BagWriter
from relay_ros.sim.scene import SceneRenderer, encode_jpeg

__all__ = [
    "BASE_TOPIC",
    "CAMERA_HZ",
    "CAMERA_LATENCY_NS",
    "DROPOUT",
    "JOINT_HZ",
    "JOINT_LATENCY_NS",
    "JOINT_NAMES",
    "JOINT_TOPIC",
    "START_NS",
    "TOPIC_TYPES",
    "URDF_TOPIC",
    "WRIST_TOPIC",
    "joint_positions",
    "make_bags",
    "main",
    "read_joint_states",
]

BASE_TOPIC = "/camera/base/image_raw"
WRIST_TOPIC = "/camera/wrist/image_raw/compressed"
JOINT_TOPIC = "/joint_states"
URDF_TOPIC = "/robot_description"
TOPIC_TYPES = {
    BASE_TOPIC: "sensor_msgs/msg/Image",
    WRIST_TOPIC: "sensor_msgs/msg/CompressedImage",
    JOINT_TOPIC: "sensor_msgs/msg/JointState",
}
JOINT_NAMES = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper_joint")
CAMERA_HZ = 30.0
JOINT_HZ = 100.0
#: Seconds after the bag start during which both cameras are silent, [start, end).
DROPOUT = (2.5, 3.5)
#: Bag time of the first possible message (2023-11-14T22:13:20Z), ns.
START_NS = 1_700_000_000_000_000_000
CAMERA_LATENCY_NS = 5_000_000
JOINT_LATENCY_NS = 1_000_000

_QOS = {
    BASE_TOPIC: RecordedQos(reliability="reliable", durability="volatile", depth=5),
    WRIST_TOPIC: RecordedQos(reliability="reliable", durability="volatile", depth=5),
    JOINT_TOPIC: RecordedQos(reliability="reliable", durability="volatile", depth=10),
}
_CAMERA_NAMES = {BASE_TOPIC: "base", WRIST_TOPIC: "wrist"}
_FRAME_IDS = {BASE_TOPIC: "base_camera_optical_frame", WRIST_TOPIC: "wrist_camera_optical_frame"}

# Per-joint sine motion: (offset rad, amplitude rad, frequency Hz, phase rad); the
# gripper is in metres (0..0.04).
_MOTION = (
    (0.0, 0.6, 0.20, 0.0),
    (-0.4, 0.3, 0.25, 0.5),
    (0.8, 0.4, 0.15, 1.0),
    (0.0, 0.5, 0.30, 1.5),
    (0.3, 0.3, 0.35, 2.0),
    (0.0, 0.8, 0.10, 2.5),
    (0.02, 0.02, 0.50, 0.0),
)


def joint_positions(t: float) -> np.ndarray:
    """Joint positions (rad; gripper m) at ``t`` seconds after the bag start, shape (7,)."""
    return np.array(
        [c + a * math.sin(2 * math.pi * f * t + p) for c, a, f, p in _MOTION], dtype=np.float64
    )


def _joint_velocities(t: float) -> np.ndarray:
    return np.array(
        [a * 2 * math.pi * f * math.cos(2 * math.pi * f * t + p) for _, a, f, p in _MOTION],
        dtype=np.float64,
    )


def _stamp(store: Any, ns: int) -> Any:
    return store.types["builtin_interfaces/msg/Time"](sec=ns // 1_000_000_000, nanosec=ns % 10**9)


def _header(store: Any, ns: int, frame_id: str) -> Any:
    return store.types["std_msgs/msg/Header"](stamp=_stamp(store, ns), frame_id=frame_id)


def _in_dropout(t: float, dropout: tuple[float, float]) -> bool:
    return dropout[0] <= t < dropout[1]


def _messages(
    store: Any,
    *,
    seconds: float,
    dropout: tuple[float, float],
    width: int,
    height: int,
    seed: int,
) -> list[tuple[int, str, bytes]]:
    """All messages as (bag timestamp ns, topic, CDR bytes), in time order."""
    rng = np.random.default_rng(seed)
    out: list[tuple[int, str, bytes]] = []
    image_t = store.types["sensor_msgs/msg/Image"]
    compressed_t = store.types["sensor_msgs/msg/CompressedImage"]
    joint_t = store.types["sensor_msgs/msg/JointState"]

    scenes = {
        topic: SceneRenderer(width, height, seed, _CAMERA_NAMES[topic])
        for topic in (BASE_TOPIC, WRIST_TOPIC)
    }
    n_frames = int(math.ceil(seconds * CAMERA_HZ))
    for k in range(n_frames):
        t = k / CAMERA_HZ
        if t >= seconds or _in_dropout(t, dropout):
            continue
        for topic in (BASE_TOPIC, WRIST_TOPIC):
            jitter_ns = int(rng.integers(0, 1_000_000))
            recv_ns = START_NS + int(round(t * 1e9)) + CAMERA_LATENCY_NS + jitter_ns
            header = _header(store, recv_ns - CAMERA_LATENCY_NS - jitter_ns, _FRAME_IDS[topic])
            rgb = scenes[topic].render(t)
            if topic == BASE_TOPIC:
                msg = image_t(
                    header=header,
                    height=height,
                    width=width,
                    encoding="rgb8",
                    is_bigendian=0,
                    step=width * 3,
                    data=rgb.reshape(-1),
                )
            else:
                jpeg = np.frombuffer(encode_jpeg(rgb, 90), dtype=np.uint8)
                msg = compressed_t(header=header, format="rgb8; jpeg compressed bgr8", data=jpeg)
            out.append((recv_ns, topic, bytes(store.serialize_cdr(msg, TOPIC_TYPES[topic]))))

    n_joint = int(math.ceil(seconds * JOINT_HZ))
    for k in range(n_joint):
        nominal_ns = int(round(k / JOINT_HZ * 1e9))
        jitter_ns = int(rng.integers(-2_000_000, 2_000_001)) if k else 0
        capture_ns = max(nominal_ns + jitter_ns, 0)
        if capture_ns >= seconds * 1e9:
            continue
        t = capture_ns / 1e9
        msg = joint_t(
            header=_header(store, START_NS + capture_ns, ""),
            name=list(JOINT_NAMES),
            position=joint_positions(t),
            velocity=_joint_velocities(t),
            effort=np.zeros(len(JOINT_NAMES), dtype=np.float64),
        )
        recv_ns = START_NS + capture_ns + JOINT_LATENCY_NS
        out.append(
            (recv_ns, JOINT_TOPIC, bytes(store.serialize_cdr(msg, TOPIC_TYPES[JOINT_TOPIC])))
        )

    # Stable sort: ties keep generation order, so both storages hold the same sequence.
    out.sort(key=lambda m: m[0])
    return out


def make_bags(
    out_dir: str | Path,
    *,
    seconds: float = 6.0,
    dropout: tuple[float, float] = DROPOUT,
    width: int = 320,
    height: int = 240,
    seed: int = 0,
    storages: tuple[str, ...] = ("mcap", "sqlite3"),
    version: int = 8,
    urdf: str | None = None,
) -> dict[str, Path]:
    """Write one fixture bag per storage into ``out_dir``.

    Args:
        out_dir: Directory to write into (created if missing); bags are
            ``fixture_<storage>`` inside it and must not exist yet.
        seconds: Bag length in seconds.
        dropout: [start, end) seconds after the bag start with no camera frames.
        width: Frame width in pixels (both cameras).
        height: Frame height in pixels (both cameras).
        seed: Seed for the timing jitter and the camera scenes.
        storages: Storage formats to write, from ``("mcap", "sqlite3")``.
        version: rosbag2 metadata version (8 is readable by Humble).
        urdf: Record this URDF on ``/robot_description`` (std_msgs/String,
            transient-local as robot_state_publisher offers it) at the bag's start.

    Returns:
        The bag directory per storage.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bags: dict[str, Path] = {}
    messages: list[tuple[int, str, bytes]] | None = None
    for storage in storages:
        path = out / f"fixture_{storage}"
        with BagWriter(path, storage=storage, version=version) as writer:
            if messages is None:
                messages = _messages(
                    writer.typestore,
                    seconds=seconds,
                    dropout=dropout,
                    width=width,
                    height=height,
                    seed=seed,
                )
            for topic, msgtype in TOPIC_TYPES.items():
                writer.add_topic(topic, msgtype, qos=[_QOS[topic]])
            if urdf is not None:
                latched = RecordedQos(reliability="reliable", durability="transient_local", depth=1)
                writer.add_topic(URDF_TOPIC, "std_msgs/msg/String", qos=[latched])
                string_t = writer.typestore.types["std_msgs/msg/String"]
                text = bytes(
                    writer.typestore.serialize_cdr(string_t(data=urdf), "std_msgs/msg/String")
                )
                writer.write(URDF_TOPIC, START_NS, text)
            for stamp, topic, data in messages:
                writer.write(topic, stamp, data)
        bags[storage] = path
    return bags


def read_joint_states(bag: str | Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The recorded ``/joint_states``: bag times (s) and positions per joint, read back."""
    from relay_ros.bag.reader import BagReader

    with BagReader(bag) as reader:
        times, rows = [], []
        for message in reader.messages([JOINT_TOPIC]):
            msg = reader.deserialize(message)
            times.append(message.timestamp_ns / 1e9)
            rows.append(dict(zip(msg.name, msg.position)))
    return np.array(times), {j: np.array([r[j] for r in rows]) for j in JOINT_NAMES}


def main(argv: list[str] | None = None) -> int:
    """Command line entry: write the fixture bags into OUT_DIR and print their paths."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seconds", type=float, default=6.0, help="bag length in seconds")
    parser.add_argument("--seed", type=int, default=0, help="seed for the timing jitter and scenes")
    args = parser.parse_args(argv)
    for storage, path in make_bags(args.out_dir, seconds=args.seconds, seed=args.seed).items():
        print(f"{storage}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
