"""Bag reading and writing without rclpy: fixture bags, round trips, QoS, errors.

Real bag files in both storage formats, written by rosbags and read back.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from make_fixture_bags import (
    BASE_TOPIC,
    DROPOUT,
    JOINT_NAMES,
    JOINT_TOPIC,
    START_NS,
    TOPIC_TYPES,
    WRIST_TOPIC,
    joint_positions,
    make_bags,
)

from relay_ros.bag import (
    BagError,
    BagReader,
    BagWriter,
    MissingTopicsError,
    PlaybackQos,
    RecordedQos,
    playback_qos,
)

STORAGES = ("mcap", "sqlite3")


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_bags(tmp_path_factory.mktemp("fixture_bags"))


# -- fixture bags -------------------------------------------------------------------------


@pytest.mark.parametrize("storage", STORAGES)
def test_fixture_topics_types_counts(bags: dict[str, Path], storage: str) -> None:
    with BagReader(bags[storage]) as reader:
        assert reader.storage == storage
        assert reader.version == 8
        assert {t: i.msgtype for t, i in reader.topics.items()} == TOPIC_TYPES
        # 6 s at 30 Hz minus the 1 s dropout; 6 s at 100 Hz.
        assert {t: i.count for t, i in reader.topics.items()} == {
            BASE_TOPIC: 150,
            WRIST_TOPIC: 150,
            JOINT_TOPIC: 600,
        }
        assert reader.message_count == 900
        assert START_NS <= reader.start_ns < reader.end_ns
        assert 5.9 < reader.duration_s < 6.0


def test_both_storages_hold_the_same_sequence_in_time_order(bags: dict[str, Path]) -> None:
    sequences = {}
    for storage in STORAGES:
        with BagReader(bags[storage]) as reader:
            sequences[storage] = list(reader.messages())
    mcap, sqlite = sequences["mcap"], sequences["sqlite3"]
    assert len(mcap) == 900
    assert mcap == sqlite
    stamps = [m.timestamp_ns for m in mcap]
    assert stamps == sorted(stamps)


@pytest.mark.parametrize("storage", STORAGES)
def test_dropout_is_visible_in_camera_timestamps(bags: dict[str, Path], storage: str) -> None:
    lo = START_NS + int(DROPOUT[0] * 1e9)
    hi = START_NS + int(DROPOUT[1] * 1e9)
    with BagReader(bags[storage]) as reader:
        for topic in (BASE_TOPIC, WRIST_TOPIC):
            stamps = np.array([m.timestamp_ns for m in reader.messages([topic])])
            gaps = np.diff(stamps) / 1e9
            # One gap of about a second (the dropout); every other gap is one frame.
            assert int(np.sum(gaps > 0.5)) == 1
            assert 1.0 <= gaps.max() < 1.1
            assert gaps[gaps < 0.5].max() < 1 / 30 + 0.002
            # Frames captured in the dropout window are missing (receive adds <= 6 ms).
            assert not np.any((stamps >= lo + 6_000_000) & (stamps < hi))
        # Joint states keep coming during the dropout.
        joints = [m for m in reader.messages([JOINT_TOPIC], start_ns=lo, stop_ns=hi)]
        assert 95 <= len(joints) <= 105


@pytest.mark.parametrize("storage", STORAGES)
def test_joint_states_have_jitter_names_and_smooth_motion(
    bags: dict[str, Path], storage: str
) -> None:
    with BagReader(bags[storage]) as reader:
        msgs = list(reader.messages([JOINT_TOPIC]))
        periods = np.diff([m.timestamp_ns for m in msgs]) / 1e6
        assert periods.min() > 5.0 and periods.max() < 15.0
        assert periods.std() > 0.5  # jittered, not a perfect 10 ms grid
        first = reader.deserialize(msgs[0])
        assert list(first.name) == list(JOINT_NAMES)
        t = (first.header.stamp.sec * 10**9 + first.header.stamp.nanosec - START_NS) / 1e9
        np.testing.assert_allclose(first.position, joint_positions(t))
        positions = np.array([reader.deserialize(m).position for m in msgs])
        assert np.abs(np.diff(positions, axis=0)).max() < 0.05


@pytest.mark.parametrize("storage", STORAGES)
def test_camera_frames_decode(bags: dict[str, Path], storage: str) -> None:
    with BagReader(bags[storage]) as reader:
        raw = reader.deserialize(next(reader.messages([BASE_TOPIC])))
        assert (raw.width, raw.height, raw.encoding, raw.step) == (320, 240, "rgb8", 960)
        assert len(raw.data) == 320 * 240 * 3
        compressed = reader.deserialize(next(reader.messages([WRIST_TOPIC])))
        assert compressed.format == "rgb8; jpeg compressed bgr8"
        bgr = cv2.imdecode(np.asarray(compressed.data, dtype=np.uint8), cv2.IMREAD_COLOR)
        assert bgr.shape == (240, 320, 3)
        assert raw.header.frame_id == "base_camera_optical_frame"


@pytest.mark.parametrize("storage", STORAGES)
def test_fixture_recorded_qos(bags: dict[str, Path], storage: str) -> None:
    with BagReader(bags[storage]) as reader:
        qos = reader.topics[BASE_TOPIC].qos
        assert qos == (RecordedQos(reliability="reliable", durability="volatile", depth=5),)
        assert reader.topics[JOINT_TOPIC].playback_qos == PlaybackQos(
            "reliable", "volatile", "keep_last", 10
        )


def test_fixture_script_is_deterministic(tmp_path: Path, bags: dict[str, Path]) -> None:
    again = make_bags(tmp_path, storages=("mcap",))
    with BagReader(again["mcap"]) as a, BagReader(bags["mcap"]) as b:
        assert list(a.messages()) == list(b.messages())


# -- writer round trip --------------------------------------------------------------------


def _string_msg(writer: BagWriter, text: str) -> bytes:
    msg = writer.typestore.types["std_msgs/msg/String"](data=text)
    return writer.serialize(msg, "std_msgs/msg/String")


@pytest.mark.parametrize("storage", STORAGES)
def test_writer_round_trip_version_8(tmp_path: Path, storage: str) -> None:
    path = tmp_path / "out"
    qos = RecordedQos(reliability="best_effort", durability="transient_local", depth=3)
    with BagWriter(path, storage=storage) as writer:
        writer.add_topic("/chatter", "std_msgs/msg/String", qos=[qos])
        writer.add_topic("/empty", "std_msgs/msg/String")
        payloads = [(1_000 + 10 * i, _string_msg(writer, f"hello {i}")) for i in range(5)]
        for stamp, data in payloads:
            writer.write("/chatter", stamp, data)
        assert writer.counts == {"/chatter": 5, "/empty": 0}
    assert writer.closed

    meta = yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["version"] == 8
    assert meta["storage_identifier"] == storage
    # Version 8 stores offered QoS as a YAML string with rmw enum integers (Humble format).
    chatter = next(
        t for t in meta["topics_with_message_count"] if t["topic_metadata"]["name"] == "/chatter"
    )
    offered = chatter["topic_metadata"]["offered_qos_profiles"]
    assert isinstance(offered, str)
    assert yaml.safe_load(offered)[0]["reliability"] == 2  # RMW_QOS_POLICY_RELIABILITY_BEST_EFFORT

    with BagReader(path) as reader:
        assert reader.storage == storage
        assert reader.topics["/chatter"].count == 5
        assert reader.topics["/empty"].count == 0
        assert reader.topics["/chatter"].qos == (qos,)
        back = [(m.timestamp_ns, m.data) for m in reader.messages(["/chatter"])]
        assert back == payloads
        assert reader.deserialize(next(reader.messages())).data == "hello 0"
        assert list(reader.messages(["/empty"])) == []


def test_jazzy_structured_qos_is_read(tmp_path: Path) -> None:
    """Version 9 (Jazzy) writes offered_qos_profiles as a YAML list with names."""
    path = tmp_path / "v9"
    qos = RecordedQos(reliability="best_effort", durability="transient_local", depth=7)
    with BagWriter(path, storage="mcap", version=9) as writer:
        writer.add_topic("/chatter", "std_msgs/msg/String", qos=[qos])
        writer.write("/chatter", 5, _string_msg(writer, "x"))
    meta = yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    offered = meta["topics_with_message_count"][0]["topic_metadata"]["offered_qos_profiles"]
    assert offered[0]["reliability"] == "best_effort"
    with BagReader(path) as reader:
        assert reader.version == 9
        assert reader.topics["/chatter"].qos == (qos,)
        assert reader.topics["/chatter"].playback_qos == PlaybackQos(
            "best_effort", "transient_local", "keep_last", 7
        )


# Exactly what Humble's `ros2 bag record` writes: history and depth are not
# discoverable, so it stores history 3 (unknown) and depth 0.
HUMBLE_QOS = (
    "- history: 3\n  depth: 0\n  reliability: 2\n  durability: 2\n"
    "  deadline:\n    sec: 2147483647\n    nsec: 4294967295\n"
    "  lifespan:\n    sec: 2147483647\n    nsec: 4294967295\n"
    "  liveliness: 1\n  liveliness_lease_duration:\n    sec: 2147483647\n"
    "    nsec: 4294967295\n  avoid_ros_namespace_conventions: false"
)


def test_humble_yaml_string_qos_is_read(tmp_path: Path) -> None:
    path = tmp_path / "humble"
    with BagWriter(path, storage="sqlite3") as writer:
        writer.add_topic("/chatter", "std_msgs/msg/String")
        writer.write("/chatter", 5, _string_msg(writer, "x"))
    meta_path = path / "metadata.yaml"
    doc = yaml.safe_load(meta_path.read_text())
    info = doc["rosbag2_bagfile_information"]
    info["version"] = 5  # Humble
    info["topics_with_message_count"][0]["topic_metadata"]["offered_qos_profiles"] = HUMBLE_QOS
    meta_path.write_text(yaml.safe_dump(doc))
    with BagReader(path) as reader:
        (recorded,) = reader.topics["/chatter"].qos
        assert (recorded.history, recorded.depth, recorded.reliability) == (
            "unknown",
            0,
            "best_effort",
        )
        assert reader.topics["/chatter"].playback_qos == PlaybackQos(
            "best_effort", "volatile", "keep_last", 10
        )


def test_playback_qos_adapts_like_ros2_bag_play() -> None:
    reliable = RecordedQos(reliability="reliable", durability="transient_local", depth=1)
    best_effort = RecordedQos(reliability="best_effort", durability="volatile", depth=20)
    keep_all = RecordedQos(history="keep_all", depth=0, durability="transient_local")
    assert playback_qos([]) == PlaybackQos("reliable", "volatile", "keep_last", 10)
    assert playback_qos([reliable]) == PlaybackQos("reliable", "transient_local", "keep_last", 1)
    assert playback_qos([reliable, best_effort]) == PlaybackQos(
        "best_effort", "volatile", "keep_last", 20
    )
    assert playback_qos([keep_all]) == PlaybackQos("reliable", "transient_local", "keep_all", 10)
    assert playback_qos([keep_all, reliable]) == PlaybackQos(
        "reliable", "transient_local", "keep_last", 1
    )


def test_split_bag_is_merged_in_time_order(tmp_path: Path) -> None:
    """A bag split into two files whose times interleave still reads in time order."""
    parts = []
    for i, stamps in enumerate(([10, 30, 2_000_000_050], [20, 1_500_000_000, 2_000_000_040])):
        part = tmp_path / f"part{i}"
        with BagWriter(part, storage="mcap") as writer:
            writer.add_topic("/chatter", "std_msgs/msg/String")
            for s in stamps:
                writer.write("/chatter", s, _string_msg(writer, str(s)))
        parts.append(part)
    merged = tmp_path / "merged"
    shutil.copytree(parts[0], merged)
    shutil.copy(parts[1] / "part1.mcap", merged / "part1.mcap")
    doc = yaml.safe_load((merged / "metadata.yaml").read_text())
    info = doc["rosbag2_bagfile_information"]
    info["relative_file_paths"] = ["part0.mcap", "part1.mcap"]
    info["message_count"] = 6
    info["duration"]["nanoseconds"] = 2_000_000_050 - 10
    info["topics_with_message_count"][0]["message_count"] = 6
    (merged / "metadata.yaml").write_text(yaml.safe_dump(doc))
    with BagReader(merged) as reader:
        stamps = [m.timestamp_ns for m in reader.messages()]
    assert stamps == [10, 20, 30, 1_500_000_000, 2_000_000_040, 2_000_000_050]


# -- errors -------------------------------------------------------------------------------


def test_missing_bag_path(tmp_path: Path) -> None:
    path = tmp_path / "nope"
    with pytest.raises(BagError) as err:
        BagReader(path)
    assert str(err.value) == f"bag path '{path}' does not exist"


def test_directory_without_metadata_is_not_a_bag(tmp_path: Path) -> None:
    with pytest.raises(BagError) as err:
        BagReader(tmp_path)
    assert str(err.value) == f"'{tmp_path}' is not a rosbag2 bag: it has no metadata.yaml"


def test_other_file_is_not_a_bag(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(BagError) as err:
        BagReader(path)
    assert str(err.value) == (
        f"'{path}' is not a rosbag2 bag: expected a bag directory with metadata.yaml, "
        f"or a .mcap or .db3 file"
    )


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("rosbag2_bagfile_information: [unclosed", "while parsing a flow sequence"),
        ("something_else: {}", "missing key 'rosbag2_bagfile_information'"),
        ("rosbag2_bagfile_information: {version: 8}", "missing key 'storage_identifier'"),
    ],
)
def test_corrupt_metadata(tmp_path: Path, text: str, detail: str) -> None:
    (tmp_path / "metadata.yaml").write_text(text)
    with pytest.raises(BagError) as err:
        BagReader(tmp_path)
    assert str(err.value) == f"bag '{tmp_path}' has corrupt metadata.yaml: {detail}"


def test_unsupported_storage(tmp_path: Path, bags: dict[str, Path]) -> None:
    path = tmp_path / "bag"
    shutil.copytree(bags["sqlite3"], path)
    meta = path / "metadata.yaml"
    meta.write_text(
        meta.read_text().replace("storage_identifier: sqlite3", "storage_identifier: x")
    )
    with pytest.raises(BagError) as err:
        BagReader(path)
    assert str(err.value) == (
        f"bag '{path}' uses storage 'x'; supported storages are ['mcap', 'sqlite3']"
    )


def test_truncated_mcap_is_corrupt(tmp_path: Path, bags: dict[str, Path]) -> None:
    path = tmp_path / "bag"
    shutil.copytree(bags["mcap"], path)
    data_file = path / "fixture_mcap.mcap"
    data_file.write_bytes(data_file.read_bytes()[:100_000])
    with pytest.raises(BagError) as err:
        BagReader(path)
    assert str(err.value) == f"bag '{path}' is corrupt or unreadable: File end magic is invalid."


def test_garbage_sqlite3_is_corrupt(tmp_path: Path, bags: dict[str, Path]) -> None:
    path = tmp_path / "bag"
    shutil.copytree(bags["sqlite3"], path)
    db = path / "fixture_sqlite3.db3"
    db.write_bytes(b"not a database" * 100)
    with pytest.raises(BagError) as err:
        BagReader(path)
    assert str(err.value).startswith(f"bag '{path}' is corrupt or unreadable: ")
    assert "file is not a database" in str(err.value)


def test_damaged_mcap_data_fails_while_reading(tmp_path: Path, bags: dict[str, Path]) -> None:
    path = tmp_path / "bag"
    shutil.copytree(bags["mcap"], path)
    data_file = path / "fixture_mcap.mcap"
    data = bytearray(data_file.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 1000] = b"\xff" * 1000
    data_file.write_bytes(bytes(data))
    with BagReader(path) as reader, pytest.raises(BagError) as err:
        for _ in reader.messages():
            pass
    assert str(err.value).startswith(f"bag '{path}' is corrupt or unreadable: ")


def test_missing_topics_are_named_with_the_bags_topics(bags: dict[str, Path]) -> None:
    with BagReader(bags["mcap"]) as reader:
        with pytest.raises(MissingTopicsError) as err:
            reader.messages(["/joint_states", "/camera/top/image_raw", "/a"])
        assert err.value.missing == ["/a", "/camera/top/image_raw"]
        assert str(err.value) == (
            f"bag '{bags['mcap']}' has no topic ['/a', '/camera/top/image_raw']; its topics "
            f"are ['/camera/base/image_raw', '/camera/wrist/image_raw/compressed', "
            f"'/joint_states']"
        )


def test_closed_reader(bags: dict[str, Path]) -> None:
    reader = BagReader(bags["mcap"])
    reader.close()
    reader.close()
    with pytest.raises(BagError) as err:
        reader.messages()
    assert str(err.value) == f"bag '{bags['mcap']}' is closed"


def test_writer_errors(tmp_path: Path) -> None:
    with pytest.raises(BagError) as err:
        BagWriter(tmp_path)
    assert str(err.value) == f"bag path '{tmp_path}' exists already; bags are never overwritten"
    with pytest.raises(BagError) as err:
        BagWriter(tmp_path / "a", storage="rosbag1")
    assert str(err.value) == (
        f"storage 'rosbag1' is not one of ['mcap', 'sqlite3'] (bag '{tmp_path / 'a'}')"
    )
    with pytest.raises(BagError) as err:
        BagWriter(tmp_path / "a", version=5)
    assert str(err.value) == f"bag version 5 is not one of [8, 9] (bag '{tmp_path / 'a'}')"
    path = tmp_path / "b"
    with BagWriter(path) as writer:
        with pytest.raises(BagError) as err:
            writer.add_topic("/x", "my_msgs/msg/Thing")
        assert str(err.value) == (
            "message type 'my_msgs/msg/Thing' of topic '/x' is not in the rosbags typestore; "
            "expected a standard ROS 2 type such as 'sensor_msgs/msg/Image'"
        )
        writer.add_topic("/chatter", "std_msgs/msg/String")
        with pytest.raises(BagError) as err:
            writer.write("/other", 1, b"")
        assert str(err.value) == (
            f"topic '/other' was not added to bag '{path}'; added topics are ['/chatter']"
        )
    with pytest.raises(BagError) as err:
        writer.write("/chatter", 1, b"")
    assert str(err.value) == f"bag '{path}' is closed"
