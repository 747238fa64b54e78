"""relay-ros replay: fixture bags through policy_node on bag time, real server, real DDS.

The fixture bags (test/make_fixture_bags.py) are generated once per module, and
each storage is replayed once per module (seed 0) with the default recorded
policy; the tests then look at the reports and the output bags. Three more
replays against the synthetic policy (both bags on the reference server, the
mcap bag again on a server named by WALLE_URL) check reproducibility.

Reproducibility: playback and the policy round trip run in real time, so which
recorded joint-state message an observation catches can differ between runs
(the node's timer fires on the first ``/clock`` after a tick, and a busy
executor may take the observation before or after a joint state published
around ``t_obs``). What must not differ is the policy's answer to an
observation: the test identifies, for every chunk of both runs, the recorded
joint state it was computed from (the reference server's policy depends only on
the state, the prompt and the seed, so recomputing it locally finds the one
that reproduces the chunk exactly), and requires chunks of the two runs from
the same joint state to be identical. ``/clock`` at 500 Hz and a fixed
``request_lead_s`` keep the runs' observation times close, so such pairs are
common on an idle machine; they are not required, since the local recomputation
already ties every chunk of every run to the seed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    make_bags,
    read_joint_states,
)
from node_rig import watched_controllers

from relay_ros.bag import BagReader, BagWriter
from relay_ros.bag.replay import Chunk, ReplayError, ReplayReport, read_params_file, replay
from relay_ros.cli import main
from relay_ros.paths import config_dir
from relay_ros.pipeline.camera_frames import FRAME_LOOKAHEAD_S
from relay_ros.pipeline.gate.chunks import MAX_START_DELAY_SLOTS
from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.server.metadata import build_metadata
from relay_ros.server.synthetic import SyntheticPolicy

pytest.importorskip("rclpy")

pytestmark = pytest.mark.ros

STORAGES = ("mcap", "sqlite3")
SEED = 0
CLOCK_HZ = 500.0
LEAD_S = 0.1
ARM = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6")
PI05 = read_params_file(config_dir() / "pi05.yaml")
SENSOR_TIMEOUT_S = float(PI05["sensor_timeout_s"])


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_bags(tmp_path_factory.mktemp("replay_fixtures"))


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replay_out")


#: The synthetic policy's chunks start wherever its circle is, not where the recorded
#: arm is: velocity limits wide enough that its first segments are not refused.
WIDE_VELOCITY = {
    f"joint_limits.{joint}.max_velocity": 100.0
    for joint in [f"joint{i}" for i in range(1, 7)] + ["gripper_joint"]
}


def _replay(
    ros_context: Any,
    bag: Path,
    output: Path,
    name: str,
    overrides: dict[str, Any] | None = None,
    **kwargs: Any,
) -> ReplayReport:
    return replay(
        bag,
        output=output,
        seed=SEED,
        rate=1.0,
        context=ros_context,
        node_name=name,
        clock_hz=CLOCK_HZ,
        # A fixed lead (instead of "auto", from measured latencies) keeps the
        # observation times of different runs close together; a wide first-step
        # bound lets the synthetic policy (which does not imitate the recording)
        # stream from the start instead of being refused. A fixed execute horizon, no
        # smoothing and no ramp-in: the published rows are the policy's own, each at
        # t_obs + i*dt (the tests compare them with the recording and across runs).
        overrides={
            "request_lead_s": LEAD_S,
            "max_joint_step": 3.0,
            "execute_horizon": 25,
            "smoothing": "none",
            "ramp_in_s": 0.0,
            **(overrides or {}),
        },
        **kwargs,
    )


@pytest.fixture(scope="module")
def reports(ros_context: Any, bags: dict[str, Path], out_dir: Path) -> dict[str, ReplayReport]:
    progress: list[Any] = []
    # What the node would have commanded (~/preview, a dry run) is checked against the
    # robot's velocity limits as a controller would run it from the recorded arm, which
    # went on with its recording whatever was previewed (a held preview included): a
    # controller that starts each trajectory from the measured state.
    previews = [f"/replay_{storage}/preview" for storage in STORAGES]
    with watched_controllers(
        ros_context, "pi05", previews, JOINT_TOPIC, sim_time=True, from_desired_state=False
    ) as checker:
        out = {
            storage: _replay(
                ros_context,
                bags[storage],
                out_dir / f"out_{storage}",
                f"replay_{storage}",
                storage=storage,
                progress=progress.append,
            )
            for storage in STORAGES
        }
    assert progress and progress[-1].fraction == 1.0
    assert checker.trajectories >= sum(2 * len(report.chunks) for report in out.values())
    return out


@pytest.fixture(scope="module")
def synthetic(ros_context: Any, bags: dict[str, Path], out_dir: Path) -> list[ReplayReport]:
    """Both bags against the reference server's synthetic policy."""
    out = []
    for storage in STORAGES:
        report = _replay(
            ros_context,
            bags[storage],
            out_dir / f"synthetic_{storage}",
            f"replay_synthetic_{storage}",
            policy="synthetic",
            overrides=WIDE_VELOCITY,
        )
        assert report.policy == "synthetic" and "(synthetic policy)" in report.url
        out.append(report)
    return out


@pytest.fixture(scope="module")
def rerun(ros_context: Any, bags: dict[str, Path], out_dir: Path) -> ReplayReport:
    """The mcap bag against a synthetic server of our own named by WALLE_URL (``url=""``)."""
    with run_server_in_thread(ServerOptions(models=("pi05",))) as server:
        os.environ["WALLE_URL"] = server.url_template
        try:
            report = _replay(
                ros_context,
                bags["mcap"],
                out_dir / "rerun_mcap",
                "replay_rerun",
                overrides=WIDE_VELOCITY,
                url="",
            )
        finally:
            del os.environ["WALLE_URL"]
        assert report.url == server.url("pi05")
        assert server.stats.frames >= report.counts["requests"]
    return report


def _joint_stamps(bag: Path) -> np.ndarray:
    with BagReader(bag) as reader:
        return np.array([m.timestamp_ns / 1e9 for m in reader.messages([JOINT_TOPIC])])


def test_lora_parameter_reaches_the_replay_server(
    ros_context: Any, bags: dict[str, Path], out_dir: Path
) -> None:
    # relay-ros replay ... -p lora:=so100_towels: the replay's reference server serves
    # that adapter, and every observation names it.
    saved = out_dir / "lora_observations"
    report = _replay(
        ros_context,
        bags["mcap"],
        out_dir / "out_lora",
        "replay_lora",
        overrides={"lora": "so100_towels", "lora_scale": 0.5},
        save_observations=saved,
    )
    assert report.counts["chunks_published"] >= 3 and not report.counts["error_replies"]
    records = [json.loads(p.read_text()) for p in sorted(saved.glob("*_state.json"))]
    assert records and all(
        r["sampling_params"] == {"lora": {"name": "so100_towels", "scale": 0.5}} for r in records
    )


@pytest.mark.slow
@pytest.mark.parametrize("storage", STORAGES)
def test_replay_plays_every_message_and_commands_the_configured_joints(
    reports: dict[str, ReplayReport], bags: dict[str, Path], storage: str
) -> None:
    report = reports[storage]
    with BagReader(bags[storage]) as reader:
        expected = {t: reader.topics[t].count for t in TOPIC_TYPES}
    assert report.played == expected
    assert report.bag_topics == expected
    assert report.model == "pi05" and report.seed == SEED and report.policy == "recorded"
    assert report.url.startswith("reference server at ws://127.0.0.1:")
    assert len(report.chunks) >= 3
    for chunk in report.chunks:
        assert chunk.joint_names == (*ARM, "gripper_joint")
        assert chunk.positions.shape == (len(chunk.times), 7)
        assert np.all(np.diff(chunk.times) > 0)
    assert report.dt == pytest.approx(0.02)  # the reference pi05 server's 50 Hz
    assert report.counts["chunks_published"] == len(report.chunks)
    assert report.counts["requests"] >= len(report.chunks)
    assert report.latency_ms["count"] and report.latency_ms["p50"] is not None
    # Gap per commanded joint, over points inside the recorded range.
    assert list(report.gaps) == list(JOINT_NAMES)
    for gap in report.gaps.values():
        assert gap.samples > 0 and 0.0 <= gap.mean_abs <= gap.max_abs < 2.0
    text = report.format()
    for topic in TOPIC_TYPES:
        assert f"{topic}" in text
    assert f"chunks: {len(report.chunks)} published on /replay_{storage}/preview" in text
    assert "|commanded(t) - recorded(t)|" in text


@pytest.mark.slow
@pytest.mark.parametrize("storage", STORAGES)
def test_stamps_follow_bag_time(
    reports: dict[str, ReplayReport], bags: dict[str, Path], storage: str
) -> None:
    report = reports[storage]
    with BagReader(bags[storage]) as reader:
        start, end = reader.start_ns / 1e9, reader.end_ns / 1e9
    for chunk in report.chunks:
        assert start <= chunk.t_obs <= chunk.stamp <= end
        # Published shortly after the observation in bag time (a wall-clock
        # stamp would be years away from the 2023 bag).
        assert chunk.stamp - chunk.t_obs < 1.0
        assert chunk.times[0] > chunk.stamp
    stamps = [c.stamp for c in report.chunks]
    assert stamps == sorted(stamps)
    # Replans every execute_horizon (25) actions of 20 ms: the next observation 0.5 s of
    # bag time after a switch, less the request lead, and early by at most the cameras'
    # read window (frame_arrival: when every camera has a new frame; FRAME_LOOKAHEAD_S
    # when a loaded machine's frames come unevenly). A late reply moves the switch, not
    # this gap; a late tick makes it longer: the smallest is the planned one.
    chunks = report.chunks
    gaps = [b.t_obs - a.stamp for a, b in zip(chunks, chunks[1:])]
    assert 0.5 - LEAD_S - FRAME_LOOKAHEAD_S - 0.005 <= min(gaps) <= 0.5 - LEAD_S + 0.005, gaps


@pytest.mark.parametrize("storage", STORAGES)
def test_recorded_policy_commands_exactly_the_recording(
    reports: dict[str, ReplayReport], bags: dict[str, Path], storage: str
) -> None:
    """The node times action i at t_obs + i*dt, as the recorded policy computed it."""
    report = reports[storage]
    times, positions = read_joint_states(bags[storage])
    for chunk in report.chunks:
        for j, joint in enumerate(chunk.joint_names):
            expected = np.interp(chunk.times, times, positions[joint])
            np.testing.assert_allclose(chunk.positions[:, j], expected, atol=1e-5)
    for gap in report.gaps.values():
        assert gap.samples > 0 and gap.max_abs < 1e-5
    headline = report.format().splitlines()[0]
    assert headline.startswith(
        "bridge timing error (recorded policy; 0 = a perfect bridge): mean |commanded - "
        "recorded| 0.0000, max 0.0000"
    )
    assert headline.endswith(f"held {report.held_s:.2f} s of 5.99 s")
    assert report.failures() == []


@pytest.mark.slow
def test_recorded_policy_fills_gr00t_action_groups(
    ros_context: Any, bags: dict[str, Path], out_dir: Path
) -> None:
    report = replay(
        bags["mcap"],
        params_file=config_dir() / "groot.yaml",
        overrides={"smoothing": "none", "ramp_in_s": 0.0},
        output=out_dir / "groot_mcap",
        rate=2.0,
        context=ros_context,
        node_name="replay_groot",
    )
    times, positions = read_joint_states(bags["mcap"])
    assert report.model == "groot" and report.dt == pytest.approx(1 / 30)
    assert report.chunks and report.failures() == []
    for chunk in report.chunks:
        assert chunk.joint_names == (*ARM[:5], "gripper_joint")
        for j, joint in enumerate(chunk.joint_names):
            expected = np.interp(chunk.times, times, positions[joint])
            np.testing.assert_allclose(chunk.positions[:, j], expected, atol=1e-5)


def _stale_from(bag: Path) -> float:
    """Bag time (absolute s) at which the first camera goes stale in the dropout."""
    limit = START_NS + DROPOUT[0] * 1e9
    with BagReader(bag) as reader:
        last = {
            topic: max(m.timestamp_ns for m in reader.messages([topic]) if m.timestamp_ns < limit)
            for topic in (BASE_TOPIC, WRIST_TOPIC)
        }
    return min(last.values()) / 1e9 + SENSOR_TIMEOUT_S


@pytest.mark.slow
@pytest.mark.parametrize("storage", STORAGES)
def test_nothing_is_commanded_during_the_camera_dropout(
    reports: dict[str, ReplayReport], bags: dict[str, Path], storage: str
) -> None:
    report = reports[storage]
    t0 = START_NS / 1e9
    # Each camera's last frame is fresh for sensor_timeout_s; from the first
    # camera going stale until the cameras are back no observation may be taken...
    stale_from = _stale_from(bags[storage])
    back = t0 + DROPOUT[1]
    assert stale_from <= t0 + DROPOUT[0] + SENSOR_TIMEOUT_S
    assert [c.t_obs for c in report.chunks if stale_from <= c.t_obs < back] == []
    # ...and no chunk may start: a chunk of the last fresh observation may still be
    # published at its switch time, at most the request lead (+ a tick) later.
    lead = LEAD_S + 0.02
    assert [c.stamp for c in report.chunks if stale_from + lead <= c.stamp < back] == []
    # Streaming resumes once the cameras are back.
    assert any(c.t_obs > back for c in report.chunks)
    # The report says why: a hold for stale cameras, from the end of the timeout.
    stale = [p for p in report.hold_periods if p.reason.startswith("stale observation")]
    assert stale, report.hold_periods
    period = stale[0]
    assert "camera 'base_0_rgb'" in period.reason and "sensor_timeout_s" in period.reason
    # The node stamps a frame with its clock on arrival, which /clock keeps at or
    # behind the bag time of the message: up to one /clock step earlier. It notices
    # when it next wants a request: at most an execute horizon (0.5 s) after the
    # cameras went stale, later by as much as a reply was late (a loaded machine).
    assert stale_from - t0 - 2.0 / CLOCK_HZ <= period.start <= DROPOUT[1] + 1.0
    assert period.end is not None and DROPOUT[1] <= period.end <= DROPOUT[1] + 0.2
    # Hold commands (one point per controller; sent only if a chunk was streaming)
    # in the dropout belong to the stale hold (noticed up to a sample period later).
    in_dropout = [h.stamp - t0 for h in report.holds if stale_from <= h.stamp < back]
    assert all(stamp >= period.start - 0.05 for stamp in in_dropout), (in_dropout, period)
    text = report.format()
    assert "holds (node held position instead of streaming):" in text
    assert "stale observation" in text


@pytest.mark.slow
@pytest.mark.parametrize("storage", STORAGES)
def test_output_bag_holds_preview_controllers_and_diagnostics(
    reports: dict[str, ReplayReport], bags: dict[str, Path], storage: str
) -> None:
    report = reports[storage]
    preview = f"/replay_{storage}/preview"
    with BagReader(report.output) as reader:
        assert reader.storage == storage and reader.version == 8
        assert reader.topics[preview].msgtype == "trajectory_msgs/msg/JointTrajectory"
        # Dry run: nothing on the controller topics, but they are in the bag.
        for topic in ("/arm_controller/joint_trajectory", "/gripper_controller/joint_trajectory"):
            assert reader.topics[topic].count == 0
        assert reader.topics["/diagnostics"].msgtype == "diagnostic_msgs/msg/DiagnosticArray"
        # Two messages (arm, gripper) per chunk and per hold event, stamped with bag time.
        assert reader.topics[preview].count == 2 * (len(report.chunks) + len(report.holds))
        stamps = [m.timestamp_ns for m in reader.messages([preview])]
        assert all(START_NS <= s <= START_NS + 7 * 10**9 for s in stamps)
        statuses = []
        for message in reader.messages(["/diagnostics"]):
            msg = reader.deserialize(message)
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9 - START_NS / 1e9
            for status in msg.status:
                if status.name == f"/replay_{storage}: policy":
                    statuses.append((stamp, {kv.key: kv.value for kv in status.values}))
    assert report.recorded[preview] == 2 * (len(report.chunks) + len(report.holds))
    for hold in report.holds:  # one event holds every commanded joint
        assert hold.joint_names == (*ARM, "gripper_joint") and hold.positions.shape == (7,)
    # /diagnostics at 1 Hz of bag time: ~6 in a 6 s bag. One sent while the node
    # held for the stale cameras says so (the hold may fall between two of them).
    assert 4 <= len(statuses) <= 7
    stale = [p for p in report.hold_periods if p.reason.startswith("stale observation")]
    assert stale and stale[0].end is not None
    inside = [v for t, v in statuses if stale[0].start + 0.05 < t < stale[0].end - 0.05]
    assert all("stale" in v["hold_reason"] for v in inside), (inside, stale)
    statuses = [v for _t, v in statuses]
    assert statuses[-1]["dry_run"] == "True"


class ReferencePolicy:
    """The reference server's pi05 policy, computed here for a recorded joint state."""

    def __init__(self, bag: Path) -> None:
        meta = build_metadata("pi05")
        self.dt = 1.0 / float(meta["control_hz"])
        self.action_dim = int(meta["action_dim"])
        self.policy = SyntheticPolicy(
            action_horizon=int(meta["action_horizon"]), control_hz=float(meta["control_hz"])
        )
        with BagReader(bag) as reader:
            stamps, states = [], []
            for message in reader.messages([JOINT_TOPIC]):
                msg = reader.deserialize(message)
                order = {name: i for i, name in enumerate(msg.name)}
                stamps.append(message.timestamp_ns / 1e9)
                states.append([msg.position[order[j]] for j in PI05["state_joints"]])
        self.stamps = np.array(stamps)
        self.states = np.array(states)
        self._cache: dict[int, np.ndarray] = {}

    def actions(self, index: int) -> np.ndarray:
        """(H, 7) actions for joint state ``index`` (state zero-padded as float32)."""
        if index not in self._cache:
            state = np.zeros(self.action_dim, np.float32)
            state[: self.states.shape[1]] = self.states[index]
            rng = np.random.default_rng(SEED)
            flat = self.policy.chunk(state, rng, prompt=PI05["prompt"], action_dim=self.action_dim)
            self._cache[index] = flat[:, : self.states.shape[1]].astype(np.float64)
        return self._cache[index]

    def source(self, chunk: Chunk) -> tuple[int, np.ndarray] | None:
        """The joint state (index) whose policy output is exactly this chunk, and the
        chunk's action indices, if any.

        Candidates are the joint states up to sensor_timeout_s before and 20 ms after
        t_obs: on a loaded machine the executor may deliver joint states late, and the
        node takes none older than that. A chunk the node started a few slots later (a
        still arm that needs them to reach its first point within the limits,
        MAX_START_DELAY_SLOTS) has its points that many slots later than their actions.
        """
        timed = chunk.action_indices(self.dt)
        lo = np.searchsorted(self.stamps, chunk.t_obs - SENSOR_TIMEOUT_S)
        hi = np.searchsorted(self.stamps, chunk.t_obs + 0.02)
        for delay in range(MAX_START_DELAY_SLOTS + 1):
            indices = timed - delay
            if indices.min() < 0:
                break
            for index in range(int(hi) - 1, int(lo) - 1, -1):
                if np.array_equal(self.actions(index)[indices], chunk.positions):
                    return index, indices
        return None


@pytest.mark.slow
def test_same_seed_gives_identical_trajectories(
    synthetic: list[ReplayReport], rerun: ReplayReport, bags: dict[str, Path]
) -> None:
    policy = ReferencePolicy(bags["mcap"])
    runs = [*synthetic, rerun]
    t0 = START_NS / 1e9
    sources: list[dict[int, tuple[Chunk, np.ndarray]]] = []
    for run in runs:
        by_state: dict[int, Chunk] = {}
        for chunk in run.chunks:
            found = policy.source(chunk)
            # Every chunk is the seeded policy's answer to a recorded joint state
            # taken (almost always just before) t_obs.
            assert found is not None, (round(chunk.t_obs - t0, 4), chunk.positions[:2])
            index, indices = found
            by_state[index] = (chunk, indices)
        sources.append(by_state)
    pairs = 0
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            for index in sources[i].keys() & sources[j].keys():
                (a, ia), (b, ib) = sources[i][index], sources[j][index]
                common = np.intersect1d(ia, ib)
                assert len(common) >= 10
                np.testing.assert_array_equal(
                    a.positions[np.isin(ia, common)], b.positions[np.isin(ib, common)]
                )
                pairs += 1
    # Every chunk of every run is the seeded policy's answer to a recorded state (above):
    # that is what proves the seed decides the trajectory, however the runs' timing
    # fell. Runs that caught the same state are also compared directly; on an idle
    # machine most do, on a loaded one their observation times drift apart.
    t_obs = [[round(c.t_obs - t0, 4) for c in run.chunks] for run in runs]
    assert all(len(by_state) >= 3 for by_state in sources), (pairs, t_obs)


# ---------------------------------------------------------------------- errors
def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_missing_bag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    code, out, err = _cli(["replay", str(missing)], capsys)
    assert code == 2 and out == ""
    assert err == f"relay-ros replay: error: bag path '{missing}' does not exist\n"


def test_cli_bag_without_configured_topics(
    bags: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camera_map = tmp_path / "cameras.yaml"
    camera_map.write_text(
        "base_0_rgb:\n  topic: /camera/front/image_raw\n"
        "left_wrist_0_rgb:\n  topic: /camera/wrist/image_raw/compressed\n"
    )
    bag = bags["sqlite3"]
    code, out, err = _cli(["replay", str(bag), "--camera-map", str(camera_map)], capsys)
    assert code == 2 and out == ""
    assert err == (
        f"relay-ros replay: error: bag '{bag}' has no topic ['/camera/front/image_raw']; "
        f"its topics are ['{BASE_TOPIC}', '{WRIST_TOPIC}', '{JOINT_TOPIC}']\n"
    )


def test_cli_bag_missing_joint_states(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = tmp_path / "cameras_only"
    with BagWriter(bag, storage="mcap") as writer:
        writer.add_topic(BASE_TOPIC, TOPIC_TYPES[BASE_TOPIC])
        writer.add_topic(WRIST_TOPIC, TOPIC_TYPES[WRIST_TOPIC])
    code, _out, err = _cli(["replay", str(bag)], capsys)
    assert code == 2
    assert err == (
        f"relay-ros replay: error: bag '{bag}' has no topic ['{JOINT_TOPIC}']; "
        f"its topics are ['{BASE_TOPIC}', '{WRIST_TOPIC}']\n"
    )


def test_cli_wrong_topic_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = tmp_path / "wrong_type"
    with BagWriter(bag, storage="mcap") as writer:
        writer.add_topic(BASE_TOPIC, "sensor_msgs/msg/CompressedImage")
        writer.add_topic(WRIST_TOPIC, TOPIC_TYPES[WRIST_TOPIC])
        writer.add_topic(JOINT_TOPIC, TOPIC_TYPES[JOINT_TOPIC])
    code, _out, err = _cli(["replay", str(bag)], capsys)
    assert code == 2
    assert err == (
        f"relay-ros replay: error: bag '{bag}' records topic '{BASE_TOPIC}' as "
        "sensor_msgs/msg/CompressedImage; the configuration expects sensor_msgs/msg/Image\n"
    )


def test_cli_corrupt_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = tmp_path / "broken"
    bag.mkdir()
    (bag / "metadata.yaml").write_text("rosbag2_bagfile_information: [\n")
    code, _out, err = _cli(["replay", str(bag)], capsys)
    assert code == 2
    assert err.startswith(f"relay-ros replay: error: bag '{bag}' has corrupt metadata.yaml: ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("storage", STORAGES)
def test_cli_corrupt_data_file(
    bags: dict[str, Path], tmp_path: Path, storage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = bags[storage]
    suffix = ".mcap" if storage == "mcap" else ".db3"
    data = next(source.glob(f"*{suffix}")).read_bytes()
    broken = tmp_path / f"truncated{suffix}"
    broken.write_bytes(data[: len(data) // 3])
    code, out, err = _cli(["replay", str(broken)], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"relay-ros replay: error: bag '{broken}' is corrupt or unreadable: ")
    assert err.count("\n") == 1


def test_cli_option_errors(
    bags: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bag = str(bags["mcap"])
    code, _out, err = _cli(["replay", bag, "--rate", "0"], capsys)
    assert (code, err) == (2, "relay-ros replay: error: rate 0.0 must be a finite number > 0\n")
    missing = tmp_path / "none.yaml"
    code, _out, err = _cli(["replay", bag, "--params-file", str(missing)], capsys)
    assert (code, err) == (2, f"relay-ros replay: error: params file '{missing}' does not exist\n")
    code, _out, err = _cli(["replay", bag, "--camera-map", str(missing)], capsys)
    assert (code, err) == (2, f"relay-ros replay: error: camera map '{missing}' does not exist\n")
    existing = tmp_path / "exists"
    existing.mkdir()
    code, _out, err = _cli(["replay", bag, "--output", str(existing)], capsys)
    assert (code, err) == (
        2,
        f"relay-ros replay: error: output bag '{existing}' exists already; "
        "bags are never overwritten\n",
    )
    code, _out, err = _cli(["replay", bag, "--url", "http://x"], capsys)
    assert (code, err) == (
        2,
        "relay-ros replay: error: --url: http://x isn't a valid URI: scheme isn't ws or wss; a "
        "policy server speaks WebSocket: write ws:// instead of http:// (e.g. ws://host/pi05)\n",
    )


def test_cli_url_without_value_needs_walle_url(
    bags: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WALLE_URL", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env above tmp_path
    code, _out, err = _cli(["replay", str(bags["mcap"]), "--url"], capsys)
    assert code == 2
    assert err == (
        "relay-ros replay: error: --url without a value uses WALLE_URL, but WALLE_URL is not "
        "set in the environment or a .env file; give the URL, e.g. --url ws://host:8000/{model}\n"
    )


def _urdf_only_params(tmp_path: Path) -> Path:
    """config/pi05.yaml without its joint_limits: the robot's URDF gives them."""
    data = yaml.safe_load((config_dir() / "pi05.yaml").read_text())
    data["/**"]["ros__parameters"].pop("joint_limits")
    path = tmp_path / "urdf_only.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_urdf_only_config_without_the_urdf_in_the_bag_fails_up_front(
    bags: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = _urdf_only_params(tmp_path)
    code, out, err = _cli(["replay", str(bags["mcap"]), "--params-file", str(params)], capsys)
    assert code == 2 and out == ""
    assert err.startswith("relay-ros replay: error: joints ['joint1', "), err
    assert "have no velocity limit" in err
    assert (
        f"the configuration takes them from the URDF on /robot_description, and bag "
        f"'{bags['mcap']}' does not record it: pass the robot's URDF with "
        "-p robot_description_file:=/path/to/robot.urdf"
    ) in err
    assert err.count("\n") == 1


def test_an_output_joint_not_in_state_joints_is_named(
    bags: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(
        ["replay", str(bags["mcap"]), "-p", "outputs.gripper.joints:=[gripperr]"], capsys
    )
    assert code == 2 and out == ""
    assert err == (
        "relay-ros replay: error: parameter 'outputs.gripper.joints' lists joint 'gripperr', "
        "which is not in state_joints ['joint1', 'joint2', 'joint3', 'joint4', 'joint5', "
        "'joint6', 'gripper_joint']: every commanded joint must be one of state_joints, named "
        "as in the joint states (a typo?)\n"
    )


@pytest.mark.slow
def test_a_urdf_only_config_plays_the_bags_robot_description(
    ros_context: Any, tmp_path: Path
) -> None:
    urdf = (config_dir() / "sim_arm.urdf").read_text()
    bag = make_bags(tmp_path / "with_urdf", storages=("mcap",), urdf=urdf)["mcap"]
    report = _replay(
        ros_context,
        bag,
        tmp_path / "out",
        "replay_urdf",
        params_file=_urdf_only_params(tmp_path),
    )
    assert report.counts["chunks_published"] > 0
    # Limits from the played URDF (published first, at the bag's start): no hold for
    # want of them once the first camera frames are there.
    late = [p for p in report.hold_periods if "no velocity limit" in p.reason and p.start > 0.1]
    assert late == [], late
    assert report.failures(allow_refusals=True) == []


def test_replay_errors_name_the_problem(bags: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match=r"storage 'bag' is not one of \['mcap', 'sqlite3'\]"):
        replay(bags["mcap"], storage="bag", output=tmp_path / "o")


@pytest.mark.slow
def test_cli_replay_end_to_end(bags: dict[str, Path], tmp_path: Path) -> None:
    """The console script in a subprocess: report on stdout, progress on stderr, PNG."""
    output, plot = tmp_path / "out", tmp_path / "replay.png"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with run_server_in_thread(ServerOptions(models=("pi05",))) as server:
        proc = _run_cli(bags["sqlite3"], output, plot, server.url_template, env, tmp_path)
        requests = server.stats.frames
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"replayed {bags['sqlite3']} (5.99 s) at rate 2 through policy_node" in out
    assert f"policy server: {server.url('pi05')}" in out
    assert "seed 3" in out
    assert f"  {BASE_TOPIC}" in out and "150 / 150" in out and "600 / 600" in out
    assert f"{requests} requests" in out
    assert "chunks: " in out and "latency (observation -> reply, bag time)" in out
    assert "stale observation" in out
    assert f"plot: {plot}" in out
    assert "Traceback" not in proc.stderr
    assert "bag " in proc.stderr and "%]" in proc.stderr  # progress lines
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with BagReader(output) as reader:
        assert reader.storage == "sqlite3"
        assert reader.topics["/policy_node/preview"].count > 0


def _run_cli(
    bag: Path, output: Path, plot: Path, url: str, env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "relay_ros.cli",
            "replay",
            str(bag),
            "--output",
            str(output),
            "--plot",
            str(plot),
            "--seed",
            "3",
            "--rate",
            "2",
            "--storage",
            "sqlite3",
            "--url",
            url,
            # The synthetic policy's first action may jump more than max_joint_step.
            "--allow-refusals",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
    )


def _robot_params(folder: Path, **replace: str) -> Path:
    """config/pi05.yaml with a relative camera map next to it, as a robot team keeps it."""
    folder.mkdir()
    (folder / "cams.yaml").write_text((config_dir() / "pi05_cameras.yaml").read_text())
    text = (
        (config_dir() / "pi05.yaml").read_text().replace('camera_map: ""', "camera_map: cams.yaml")
    )
    for old, new in replace.items():
        text = text.replace(old, new)
    path = folder / "robot.yaml"
    path.write_text(text)
    return path


def test_cli_misnamed_joint_is_one_line_naming_the_bag_joints(
    bags: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = _robot_params(tmp_path / "robot")
    bag = bags["mcap"]
    code, out, err = _cli(
        [
            "replay",
            str(bag),
            "--params-file",
            str(params),
            "-p",
            "state_joints:=[joint1, joint2, joint3, joint4, joint5, joint6, gripper]",
            "-p",
            "outputs.gripper.joints:=[gripper]",
            "-p",
            "joint_limits.gripper.has_position_limits:=true",
            "-p",
            "joint_limits.gripper.min_position:=0",
            "-p",
            "joint_limits.gripper.max_position:=0.045",
            "-p",
            "joint_limits.gripper.has_velocity_limits:=true",
            "-p",
            "joint_limits.gripper.max_velocity:=0.1",
        ],
        capsys,
    )
    assert (code, out) == (2, "")
    assert err == (
        f"relay-ros replay: error: bag '{bag}' records no joint 'gripper' "
        "(state_joints, outputs.gripper.joints, joint_limits.gripper.*) on /joint_states; its "
        "joints are "
        f"{list(JOINT_NAMES)}\n"
    )
    # The [lower, upper] form of earlier releases: what to write instead.
    code, out, err = _cli(
        ["replay", str(bag), "--params-file", str(params), "-p", "joint_limits.joint1:=[0, 1]"],
        capsys,
    )
    assert (code, out) == (2, "")
    assert err.startswith(
        "relay-ros replay: error: parameter 'joint_limits.joint1' = [0, 1] is the old "
        "[lower, upper] form; write joint_limits.joint1.has_position_limits: true, "
        "joint_limits.joint1.min_position: 0.0, joint_limits.joint1.max_position: 1.0"
    ), err
    code, _out, err = _cli(["replay", str(bag), "-p", "dry_run:=false"], capsys)
    assert (code, err) == (
        2,
        "relay-ros replay: error: parameter 'dry_run' cannot be overridden: a replay always "
        "runs with dry_run=true\n",
    )
    code, _out, err = _cli(["replay", str(bag), "--url", "ws://x", "--policy", "synthetic"], capsys)
    assert code == 2 and "policy 'synthetic' is a policy of the reference server" in err


@pytest.mark.slow
def test_cli_refusals_exit_1_and_observations_are_saved(
    bags: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real gripper range refuses chunks: exit 1; the relative camera map is found."""
    bag = bags["sqlite3"]
    params = _robot_params(tmp_path / "robot")
    monkeypatch.chdir(tmp_path)  # the camera map is next to the params file, not here
    saved = tmp_path / "seen"
    code, out, err = _cli(
        [
            "replay",
            str(bag),
            "--params-file",
            str(params),
            "--output",
            str(tmp_path / "o"),
            "--rate",
            "2",
            "--save-observations",
            str(saved),
            "-p",
            "joint_limits.gripper_joint.max_position:=0.03",
            "-p",
            "seed:=5",
        ],
        capsys,
    )
    assert code == 1, err
    assert "chunk(s) refused; see the report (--allow-refusals accepts them)" in err
    assert "outside" in out and "gripper_joint" in out  # the refusal reason, grouped
    assert out.startswith("bridge timing error (recorded policy")
    assert "seed 5" in out and f"observations: {saved}" in out
    # What the model received: one PNG per camera at the model's size, the state by name.
    states = sorted(saved.glob("*_state.json"))
    assert states and len(list(saved.glob("*_base_0_rgb.png"))) == len(states)
    png = cv2.imread(str(saved / "0001_base_0_rgb.png"))
    assert png.shape == (224, 224, 3)
    times, positions = read_joint_states(bag)
    record = json.loads(states[-1].read_text())
    t_obs = START_NS / 1e9 + record["observation_time_s"]
    # The state is a recorded joint state from around the observation time (the node
    # sees /clock in steps of rate / 100 Hz = 20 ms of bag time here).
    rows = np.array([positions[j] for j in JOINT_NAMES]).T.astype(np.float32)
    sent = np.array([record["state_joints"][j] for j in JOINT_NAMES], dtype=np.float32)
    matches = times[(rows == sent).all(axis=1)]
    assert len(matches) and np.min(np.abs(matches - t_obs)) < 0.1, (record, matches - t_obs)


def test_params_file_sections_merge(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "/**:\n  ros__parameters:\n    model: pi0\n    seed: 1\n"
        "policy_node:\n  ros__parameters:\n    seed: 2\n    outputs:\n      arm:\n"
        "        topic: /a\n"
        "other:\n  ros__parameters:\n    seed: 3\n"
    )
    assert read_params_file(path) == {"model": "pi0", "seed": 2, "outputs.arm.topic": "/a"}
    assert math.isclose(SENSOR_TIMEOUT_S, 0.5)


def test_refusal_reasons_are_grouped_without_changing_numbers() -> None:
    from relay_ros.bag.replay_monitor import _normalise

    limits = "joint 'joint4' (dim 3) is 0.41 at step 20, above its upper limit 0.1 (49 more)"
    assert (
        _normalise(limits)
        == "joint 'joint4' (dim #) is # at step #, above its upper limit # (# more)"
    )
    stale = "\"camera 'left_wrist_0_rgb'\" is 0.520 s old (sensor_timeout_s = 0.500 s)"
    assert _normalise(stale) == "\"camera 'left_wrist_0_rgb'\" is # s old (sensor_timeout_s = # s)"
