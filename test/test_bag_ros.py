"""BagPlayer and BagRecorder through real rclpy (Fast DDS on loopback).

The player publishes the fixture bags to subscriber nodes; a node with
use_sim_time follows the player's /clock; the recorder writes what it hears into
a bag that the reader opens again.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import wait_until
from make_fixture_bags import BASE_TOPIC, DROPOUT, JOINT_TOPIC, START_NS, TOPIC_TYPES, make_bags

from relay_ros.bag import BagError, BagReader, BagWriter, MissingTopicsError, RecordedQos

rclpy = pytest.importorskip("rclpy")
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import (  # noqa: E402
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
)

from relay_ros.bag.player import (  # noqa: E402
    CLOCK_TOPIC,
    MAX_STALL_S,
    BagPlayer,
    message_class,
)
from relay_ros.bag.recorder import BagRecorder  # noqa: E402

pytestmark = pytest.mark.ros

STORAGES = ("mcap", "sqlite3")
KEEP_ALL = QoSProfile(
    history=HistoryPolicy.KEEP_ALL, depth=1, reliability=ReliabilityPolicy.RELIABLE
)


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_bags(tmp_path_factory.mktemp("fixture_bags"))


def _prefix() -> str:
    return f"/t{uuid.uuid4().hex[:8]}"


@contextmanager
def spinning(context: Any, *nodes: Any) -> Iterator[None]:
    """Spin the nodes on a background executor; destroy them afterwards."""
    executor = SingleThreadedExecutor(context=context)
    for node in nodes:
        executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        executor.shutdown(timeout_sec=2.0)
        thread.join(5.0)
        for node in nodes:
            node.destroy_node()


class Listener:
    """Raw subscriptions that keep every message (bytes) per topic, and /clock values."""

    def __init__(self, context: Any, topics: dict[str, str]) -> None:
        self.node = rclpy.create_node(f"listener_{uuid.uuid4().hex[:8]}", context=context)
        self.received: dict[str, list[bytes]] = {t: [] for t in topics}
        self.clock: list[int] = []
        for topic, msgtype in topics.items():
            self.node.create_subscription(
                message_class(msgtype),
                topic,
                lambda data, t=topic: self.received[t].append(data),
                KEEP_ALL,
                raw=True,
            )
        from rosgraph_msgs.msg import Clock

        self.node.create_subscription(
            Clock,
            CLOCK_TOPIC,
            lambda msg: self.clock.append(msg.clock.sec * 10**9 + msg.clock.nanosec),
            KEEP_ALL,
        )


@pytest.mark.parametrize("storage", STORAGES)
def test_player_publishes_every_message_in_order_with_clock(
    ros_context: Any, bags: dict[str, Path], storage: str
) -> None:
    prefix = _prefix()
    remap = {t: prefix + t for t in TOPIC_TYPES}
    listener = Listener(ros_context, {prefix + t: ty for t, ty in TOPIC_TYPES.items()})
    sim = rclpy.create_node(
        f"sim_{uuid.uuid4().hex[:8]}",
        context=ros_context,
        parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, True)],
    )
    with BagReader(bags[storage]) as reader:
        expected = {t: [m.data for m in reader.messages([t])] for t in TOPIC_TYPES}
        start_ns, end_ns = reader.start_ns, reader.end_ns
    with spinning(ros_context, listener.node, sim):
        # At the bag's own rate: the 1 s camera dropout is 1 s of /clock ticks (at 4x,
        # 0.25 s, which a loaded machine's player thread can sleep through).
        with BagPlayer(ros_context, bags[storage], rate=1.0, remap=remap) as player:
            assert player.output_topics == remap
            assert player.progress.started is False
            assert player.wait_for_subscribers(10.0, [*TOPIC_TYPES, CLOCK_TOPIC])
            player.start()
            assert player.wait(timeout=60.0)
            progress = player.progress
        assert progress.done and not progress.stopped and progress.error is None
        assert progress.played == {t: len(v) for t, v in expected.items()}
        assert progress.fraction == 1.0
        assert progress.bag_time_ns == end_ns
        assert wait_until(
            lambda: all(len(listener.received[remap[t]]) == len(expected[t]) for t in expected),
            10.0,
        )
        for topic, data in expected.items():
            assert listener.received[remap[topic]] == data, topic
        # The sim-time node ends on the bag's last timestamp.
        assert wait_until(lambda: sim.get_clock().now().nanoseconds == end_ns, 5.0)

    clock = listener.clock
    assert clock[0] == start_ns and clock[-1] == end_ns
    assert clock == sorted(clock) and len(set(clock)) == len(clock)
    # /clock runs on through the camera dropout, where no camera message moves it.
    lo, hi = START_NS + int(DROPOUT[0] * 1e9), START_NS + int(DROPOUT[1] * 1e9)
    assert sum(lo <= c < hi for c in clock) >= 5


def test_a_starved_player_plays_on_later_instead_of_leaping_bag_time(
    ros_context: Any, bags: dict[str, Path]
) -> None:
    """The playback thread held off the CPU for 0.6 s (this thread keeps the GIL, as a
    loaded machine's other work does): /clock goes on from where it was, in steps of at
    most MAX_STALL_S of bag time and a tick, instead of leaping 0.6 s (which a node on
    sim time takes for a clock jump); the bag plays that much later, every message."""
    prefix = _prefix()
    listener = Listener(ros_context, {prefix + JOINT_TOPIC: TOPIC_TYPES[JOINT_TOPIC]})
    with spinning(ros_context, listener.node):
        with BagPlayer(
            ros_context,
            bags["mcap"],
            rate=1.0,
            topics=[JOINT_TOPIC],
            remap={JOINT_TOPIC: prefix + JOINT_TOPIC},
        ) as player:
            assert player.wait_for_subscribers(10.0, [JOINT_TOPIC, CLOCK_TOPIC])
            started = time.monotonic()
            player.start()
            wait_until(lambda: player.progress.bag_time_ns > START_NS + 1_000_000_000, 10.0)
            interval = sys.getswitchinterval()
            sys.setswitchinterval(5.0)  # no other thread runs while this one computes
            try:
                held = time.monotonic()
                while time.monotonic() - held < 0.6:
                    pass
            finally:
                sys.setswitchinterval(interval)
            assert player.wait(timeout=60.0)
            played_for = time.monotonic() - started
        assert player.progress.played[JOINT_TOPIC] == 600
    steps = np.diff(listener.clock) / 1e9
    assert steps.max() <= MAX_STALL_S + 0.05, steps.max()
    # The 0.6 s stall made the 6 s bag take at least that much longer.
    assert played_for >= (player.end_ns - player.start_ns) / 1e9 + 0.5


@pytest.mark.parametrize("storage", STORAGES)
def test_player_stop_and_progress(ros_context: Any, bags: dict[str, Path], storage: str) -> None:
    prefix = _prefix()
    node = rclpy.create_node(f"player_{uuid.uuid4().hex[:8]}", context=ros_context)
    try:
        player = BagPlayer(
            node,
            bags[storage],
            rate=1.0,
            topics=[JOINT_TOPIC],
            publish_clock=False,
            remap={JOINT_TOPIC: prefix + JOINT_TOPIC},
        )
        assert player.topics == (JOINT_TOPIC,)
        player.start()
        assert wait_until(lambda: player.progress.played[JOINT_TOPIC] >= 5, 10.0)
        player.stop()
        assert player.wait(timeout=5.0)
        progress = player.progress
        assert progress.done and progress.stopped and progress.error is None
        assert 5 <= progress.played[JOINT_TOPIC] < progress.total[JOINT_TOPIC] == 600
        with pytest.raises(BagError) as err:
            player.start()
        assert str(err.value) == f"player for bag '{bags[storage]}' was already started"
        player.close()
        player.close()
        # A node passed in is the caller's: the player leaves it alive.
        assert node.get_name().startswith("player_")
        assert node.count_publishers(prefix + JOINT_TOPIC) == 0
    finally:
        node.destroy_node()


def test_player_offers_recorded_qos(ros_context: Any, tmp_path: Path) -> None:
    prefix = _prefix()
    path = tmp_path / "qos"
    recorded = {
        "/latched": RecordedQos(reliability="reliable", durability="transient_local", depth=1),
        "/sensor": RecordedQos(reliability="best_effort", durability="volatile", depth=5),
        "/plain": RecordedQos(history="unknown", depth=0),
    }
    with BagWriter(path, storage="sqlite3") as writer:
        for topic, qos in recorded.items():
            writer.add_topic(topic, "std_msgs/msg/String", qos=[qos])
            msg = writer.typestore.types["std_msgs/msg/String"](data=topic)
            writer.write(topic, 1_000, writer.serialize(msg, "std_msgs/msg/String"))
    override = QoSProfile(depth=3, reliability=ReliabilityPolicy.BEST_EFFORT)
    node = rclpy.create_node(f"qos_{uuid.uuid4().hex[:8]}", context=ros_context)
    try:
        with BagPlayer(
            ros_context,
            path,
            remap={t: prefix + t for t in recorded},
            qos_overrides={"/plain": override},
        ) as player:
            expected = {
                "/latched": (ReliabilityPolicy.RELIABLE, DurabilityPolicy.TRANSIENT_LOCAL, 1),
                "/sensor": (ReliabilityPolicy.BEST_EFFORT, DurabilityPolicy.VOLATILE, 5),
                "/plain": (ReliabilityPolicy.BEST_EFFORT, DurabilityPolicy.VOLATILE, 3),
            }
            for topic, (reliability, durability, depth) in expected.items():
                profile = player.qos[topic]
                assert (profile.reliability, profile.durability, profile.depth) == (
                    reliability,
                    durability,
                    depth,
                )
                # What DDS discovery reports for the player's publisher.
                assert wait_until(
                    lambda t=topic: node.get_publishers_info_by_topic(prefix + t), 5.0
                )
                (info,) = node.get_publishers_info_by_topic(prefix + topic)
                assert info.qos_profile.reliability == reliability
                assert info.qos_profile.durability == durability
    finally:
        node.destroy_node()


def test_player_option_errors(ros_context: Any, bags: dict[str, Path]) -> None:
    with pytest.raises(BagError) as err:
        BagPlayer(ros_context, bags["mcap"], rate=0.0)
    assert str(err.value) == "playback rate 0.0 is not a finite number > 0"
    with pytest.raises(MissingTopicsError) as err:
        BagPlayer(ros_context, bags["mcap"], topics=["/camera/top/image_raw"])
    assert err.value.missing == ["/camera/top/image_raw"]
    with pytest.raises(BagError) as err:
        BagPlayer(ros_context, bags["mcap"], topics=[JOINT_TOPIC], remap={BASE_TOPIC: "/x"})
    assert str(err.value) == (
        f"topic '{BASE_TOPIC}' in remap/qos_overrides is not among the played topics "
        f"['{JOINT_TOPIC}'] of bag '{bags['mcap']}'"
    )
    with pytest.raises(BagError) as err:
        BagPlayer(ros_context, bags["mcap"].parent / "missing")
    assert str(err.value) == f"bag path '{bags['mcap'].parent / 'missing'}' does not exist"
    with pytest.raises(BagError) as err:
        message_class("no_such_msgs/msg/Thing")
    assert str(err.value).startswith("message type 'no_such_msgs/msg/Thing' is not available")
    with pytest.raises(BagError) as err:
        message_class("Thing")
    assert str(err.value) == "message type 'Thing' is not of the form 'pkg/msg/Type'"
    with BagPlayer(ros_context, bags["mcap"], topics=[JOINT_TOPIC]) as player:
        with pytest.raises(BagError) as err:
            player.wait_for_subscribers(0.1, [BASE_TOPIC])
        assert str(err.value) == (
            f"topic '{BASE_TOPIC}' is not played; played topics are ['{JOINT_TOPIC}']"
        )


def test_recorder_option_errors(ros_context: Any, tmp_path: Path) -> None:
    node = rclpy.create_node(f"rec_{uuid.uuid4().hex[:8]}", context=ros_context)
    try:
        with pytest.raises(BagError) as err:
            BagRecorder(node, tmp_path / "a", {"/x": "std_msgs/msg/String"}, clock="wall")
        assert str(err.value) == "clock 'wall' is not one of ['node', 'system']"
        with pytest.raises(BagError) as err:
            BagRecorder(node, tmp_path / "a", {})
        assert str(err.value) == (
            f"no topics to record into bag '{tmp_path / 'a'}'; expected at least one"
        )
        with pytest.raises(BagError) as err:
            BagRecorder(node, tmp_path, {"/x": "std_msgs/msg/String"})
        assert str(err.value) == (
            f"bag path '{tmp_path}' exists already; bags are never overwritten"
        )
        assert node.get_subscriptions_info_by_topic("/x") == []
    finally:
        node.destroy_node()


@pytest.mark.parametrize("storage", STORAGES)
def test_recorder_captures_published_messages(
    ros_context: Any, tmp_path: Path, storage: str
) -> None:
    from std_msgs.msg import String
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    prefix = _prefix()
    chatter, traj = prefix + "/chatter", prefix + "/arm_controller/joint_trajectory"
    talker = rclpy.create_node(f"talker_{uuid.uuid4().hex[:8]}", context=ros_context)
    rec_node = rclpy.create_node(f"rec_{uuid.uuid4().hex[:8]}", context=ros_context)
    pub_s = talker.create_publisher(String, chatter, 10)
    pub_t = talker.create_publisher(JointTrajectory, traj, 10)
    path = tmp_path / "rec"
    with spinning(ros_context, talker, rec_node):
        with BagRecorder(
            rec_node,
            path,
            {
                chatter: "std_msgs/msg/String",
                traj: "trajectory_msgs/msg/JointTrajectory",
                prefix + "/silent": "std_msgs/msg/String",
            },
            storage=storage,
        ) as recorder:
            assert wait_until(
                lambda: pub_s.get_subscription_count() and pub_t.get_subscription_count(), 10
            )
            for i in range(20):
                pub_s.publish(String(data=f"msg {i}"))
            for i in range(3):
                msg = JointTrajectory(joint_names=["joint1", "joint2"])
                msg.points = [JointTrajectoryPoint(positions=[0.1 * i, 0.2])]
                pub_t.publish(msg)
            assert recorder.wait_for({chatter: 20, traj: 3}, timeout=10.0)
        assert recorder.counts == {chatter: 20, traj: 3, prefix + "/silent": 0}

    with BagReader(path) as reader:
        assert reader.storage == storage and reader.version == 8
        assert {t: i.count for t, i in reader.topics.items()} == {
            chatter: 20,
            traj: 3,
            prefix + "/silent": 0,
        }
        texts = [reader.deserialize(m).data for m in reader.messages([chatter])]
        assert texts == [f"msg {i}" for i in range(20)]
        last = reader.deserialize(list(reader.messages([traj]))[-1])
        assert list(last.joint_names) == ["joint1", "joint2"]
        assert list(last.points[0].positions) == pytest.approx([0.2, 0.2])
        # Offered QoS of the talker's publisher (rclpy default: reliable, volatile).
        (qos,) = reader.topics[chatter].qos
        assert (qos.reliability, qos.durability) == ("reliable", "volatile")


def test_recorder_on_sim_time_stamps_messages_with_bag_time(
    ros_context: Any, bags: dict[str, Path], tmp_path: Path
) -> None:
    """The replay set-up: player + /clock in, a use_sim_time node records at bag time."""
    prefix = _prefix()
    rec_node = rclpy.create_node(
        f"rec_{uuid.uuid4().hex[:8]}",
        context=ros_context,
        parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, True)],
    )
    path = tmp_path / "rec"
    with spinning(ros_context, rec_node):
        with (
            BagPlayer(
                ros_context,
                bags["mcap"],
                rate=8.0,
                topics=[JOINT_TOPIC],
                remap={JOINT_TOPIC: prefix + JOINT_TOPIC},
            ) as player,
            # KEEP_ALL: at 8x, 800 messages a second would overflow the default depth
            # (100) whenever a loaded machine holds the recorder's executor for 125 ms.
            BagRecorder(
                rec_node,
                path,
                {prefix + JOINT_TOPIC: TOPIC_TYPES[JOINT_TOPIC]},
                storage="mcap",
                qos=KEEP_ALL,
            ) as recorder,
        ):
            assert player.wait_for_subscribers(10.0, [JOINT_TOPIC])
            assert wait_until(lambda: rec_node.count_publishers(CLOCK_TOPIC) > 0, 10.0)
            player.start()
            assert player.wait(timeout=60.0)
            assert recorder.wait_for({prefix + JOINT_TOPIC: 600}, timeout=60.0)
            # Playing a subset still runs bag time to the end of the whole bag.
            assert player.progress.bag_time_ns == player.end_ns
            assert wait_until(lambda: rec_node.get_clock().now().nanoseconds == player.end_ns, 5.0)
    with BagReader(path) as reader, BagReader(bags["mcap"]) as source:
        stamps = [m.timestamp_ns for m in reader.messages()]
        assert len(stamps) == 600
        assert stamps == sorted(stamps)
        # Stamped with the bag clock (the /clock seen when each message arrived).
        assert source.start_ns <= stamps[0] and stamps[-1] <= source.end_ns
