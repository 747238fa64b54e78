"""policy_node's live recording: real rclpy, the reference server, real subprocesses.

The node records while it streams, through its services (~/mark_episode, ~/enable,
~/end_episode); the test publishes every camera frame with its number drawn in it and
every joint state, keeps what the node sent (~/observation/*) and what the controllers
got, and reads the dataset back with pyarrow and PyAV (test/lerobot_reader.py).
A real ``policy_node`` process is killed with SIGKILL mid-episode, and the next start
repairs the dataset. ``python -m relay_ros.demo --record`` writes a dataset that
matches LeRobot's layout (test/lerobot_reference.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from frame_patterns import pattern, pattern_index
from helpers import scaled, wait_until
from lerobot_reader import load, mae, psnr
from lerobot_reference import check_dataset
from node_rig import Received, Rig, tfs_of
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_srvs.srv import SetBool, Trigger

from relay_ros.paths import config_dir
from relay_ros.pipeline.images import compressed_to_rgb, resize_with_pad
from relay_ros.recording.dataset import STAGING_DIR
from relay_ros.server import ServerOptions, run_server_in_thread

pytestmark = pytest.mark.ros

JOINTS = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper_joint"]
CAMERAS = ["base_0_rgb", "left_wrist_0_rgb"]
IMAGE = (224, 224)
MAX_MAE = 6.0  # within codec loss (test_recording.py)
MIN_PSNR = 28.0


class SlowPolicy:
    """The server's policy: from the state, every joint at 0.1 rad/s (slow enough that
    re-enabling the node after a stop never meets a first-step refusal)."""

    def infer(self, obs: dict) -> dict:
        state = np.asarray(obs["state"], dtype=np.float32).reshape(-1)
        ramp = np.arange(50, dtype=np.float32)[:, None] * 0.002
        return {"actions": (state[None, :] + ramp).astype(np.float32)}

    def reset(self) -> None:
        pass


class CountingRig(Rig):
    """A rig whose camera frame ``n`` shows ``n`` (frame_patterns) and which keeps what
    it published, with the time it published it (node clock = system clock here)."""

    def __init__(self, *args, **kwargs) -> None:
        self.frames: list[tuple[float, int]] = []
        self.joint_log: list[tuple[float, list[float]]] = []
        self.sent: list[tuple[float, dict[str, np.ndarray]]] = []
        self._next = 0
        super().__init__(*args, **kwargs)
        for key in CAMERAS:
            self.feeder.create_subscription(
                Image,
                f"/{self.node_name}/observation/{key}",
                lambda msg, key=key: self._on_sent(key, msg),
                10,
            )

    def now(self) -> float:
        return self.feeder.get_clock().now().nanoseconds * 1e-9

    def _on_sent(self, key: str, msg: Image) -> None:
        rgb = np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3)
        t_obs = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        with self._lock:
            self.sent.append((t_obs, {key: rgb.copy()}))

    def _publish_cameras(self) -> None:
        if not self.cameras_on:
            return
        n = self._next
        self._next += 1
        frame = pattern(n)
        h, w, _ = frame.shape
        stamp = self.feeder.get_clock().now()
        with self._lock:
            self.frames.append((stamp.nanoseconds * 1e-9, n))
        image = Image(height=h, width=w, encoding="rgb8", step=w * 3, data=frame.tobytes())
        image.header.stamp = stamp.to_msg()
        self._image_pub.publish(image)
        jpeg = CompressedImage(
            format="jpeg", data=cv2.imencode(".jpg", frame[:, :, ::-1])[1].tobytes()
        )
        jpeg.header.stamp = stamp.to_msg()
        self._jpeg_pub.publish(jpeg)

    def _publish_joints(self) -> None:
        if not self.joint_states_on:
            return
        if self.follow:
            self._follow_now()
        with self._lock:
            positions = [float(v) for v in self.state]
        stamp = self.feeder.get_clock().now()
        msg = JointState(name=self.joints, position=positions)
        msg.header.stamp = stamp.to_msg()
        with self._lock:
            self.joint_log.append((stamp.nanoseconds * 1e-9, positions))
        self._joint_pub.publish(msg)

    def call(self, srv_type, name: str, request):
        client = self.feeder.create_client(srv_type, f"/{self.node_name}/{name}")
        assert client.wait_for_service(timeout_sec=scaled(5))
        future = client.call_async(request)
        return wait_until(lambda: future.done() and future.result())

    def recording_status(self) -> dict | None:
        statuses = [s for s in self.statuses() if "episodes" in s]
        return statuses[-1] if statuses else None


def _hermite(p0, p1, v0, v1, span, tau):
    delta = p1 - p0
    c2 = (3.0 * delta - (2.0 * v0 + v1) * span) / span**2
    c3 = (-2.0 * delta + (v0 + v1) * span) / span**3
    return p0 + v0 * tau + c2 * tau**2 + c3 * tau**3


def _commanded(got: Received, trajectories, t: float) -> np.ndarray | None:
    """The position a controller was commanded at ``t``, from the trajectories it got
    (``got``: when each started: its stamp, or its arrival for a hold stamped zero),
    as the node's commanded motion interpolates them (cubic Hermite through the points
    with their velocities); None where it depends on the controller's start state or
    near a switch to the next trajectory."""
    stamps = [got.start_of(m) for m in trajectories]
    if any(abs(s - t) < 0.05 for s in stamps):
        return None
    before = [m for m, s in zip(trajectories, stamps) if s <= t]
    if not before:
        return None
    msg = before[-1]
    times = got.start_of(msg) + tfs_of(msg)
    points = np.array([p.positions for p in msg.points])
    velocities = np.array([p.velocities for p in msg.points])
    if t < times[0]:
        return None
    if t >= times[-1]:
        return points[-1]
    j = int(np.searchsorted(times, t, side="right")) - 1
    return _hermite(
        points[j],
        points[j + 1],
        velocities[j],
        velocities[j + 1],
        times[j + 1] - times[j],
        t - times[j],
    )


@pytest.mark.slow
def test_live_episodes_hold_what_the_node_saw_sent_and_commanded(ros_context, tmp_path):
    root = tmp_path / "ds"
    with (
        run_server_in_thread(ServerOptions(models=("pi05",), policy=SlowPolicy)) as server,
        CountingRig(
            ros_context,
            server.url_template,
            tmp_path=tmp_path,
            # The camera rate: every frame the node sends is also recorded (phase aside).
            # E pinned at 25: the automatic one switches every few frames, and the action
            # check below skips the frames near a switch (the start state decides them).
            overrides={"record_dir": str(root), "record_fps": 30, "execute_horizon": 25},
        ) as rig,
    ):
        wait_until(lambda: len(rig.snapshot().arm) >= 3, timeout=30)
        wait_until(lambda: (s := rig.recording_status()) and s["state"] == "recording", timeout=10)
        wait_until(lambda: len(rig.sent) >= 4, timeout=20)
        # Episode 0: the policy in control, marked a success.
        reply = rig.call(SetBool, "mark_episode", SetBool.Request(data=True))
        assert reply.success and reply.message.startswith("episode 0 ends (")
        assert "success, by mark_episode); it is written in the background" in reply.message
        wait_until(lambda: (root / "meta/episodes/chunk-000/file-000.parquet").exists(), timeout=20)
        # Episode 1: the policy again, until the operator disables the node.
        recorder = rig.node.recording.recorder
        wait_until(lambda: (s := recorder.status()).episode == 1 and s.episode_frames >= 20)
        disabled_at = rig.now()
        assert rig.call(SetBool, "enable", SetBool.Request(data=False)).success
        # Episode 2: a human moves the arm (the node is disabled), then hands back. Slowly
        # and a little: the controllers still hold where the node left them, and the node's
        # first trajectory after ~/enable starts there (a jump the limits must allow).
        wait_until(lambda: [m for m in rig.snapshot().arm if len(m.points) == 1])  # the hold
        with rig._lock:
            rig.follow = False
            rig._following.clear()  # the human's arm: it goes where the hand moves it
            start = rig.state.copy()
        t0 = rig.now()
        while rig.now() - t0 < scaled(1.5):
            with rig._lock:
                rig.state[:] = start + 0.01 * (rig.now() - t0)
            time.sleep(0.01)
        enable_sent = rig.now()
        assert rig.call(SetBool, "enable", SetBool.Request(data=True)).success
        enabled_at = rig.now()
        with rig._lock:
            rig.follow = True  # from where the hand left it, as the controllers' trajectories say
        count = len(rig.snapshot().arm)
        frames_then = recorder.status().episode_frames
        wait_until(lambda: len(rig.snapshot().arm) >= count + 2, timeout=20)
        wait_until(lambda: recorder.status().episode_frames >= frames_then + 30, timeout=20)
        reply = rig.call(Trigger, "end_episode", Trigger.Request())
        assert reply.success and "not marked, by end_episode" in reply.message
        wait_until(lambda: (root / "meta/episodes/chunk-000/file-002.parquet").exists(), timeout=20)
        status = wait_until(
            lambda: (s := rig.recording_status()) and s["episodes"] == "3" and s, timeout=10
        )
        got = rig.snapshot()
        frames, joint_log, sent = list(rig.frames), list(rig.joint_log), list(rig.sent)
    assert status["level"] in (0, 1) and status["record_dir"] == str(root)

    check_dataset(
        root, cameras=CAMERAS, state_names=JOINTS, action_names=JOINTS, fps=30, image_size=IMAGE
    )
    data = load(root)
    first, second, third = data.episodes[:3]
    assert [e.row["relay_ros/end_reason"] for e in data.episodes[:3]] == [
        "mark_episode",
        "disabled",
        "end_episode",
    ]
    assert [e.row["success"] for e in data.episodes[:3]] == [True, None, None]
    assert data.tasks == ["stack the blocks"]
    config = json.loads(first.row["relay_ros/config"])  # the node's parameters
    assert config["record_dir"] == str(root) and config["model"] == "pi05"
    assert config["state_joints"] == JOINTS and first.row["adapter"] is None
    assert first.row["relay_ros/source"] == "policy_node"
    frame_times = np.array([t for t, _ in frames])
    joint_times = np.array([t for t, _ in joint_log])
    expected_image = {
        CAMERAS[0]: lambda n: resize_with_pad(pattern(n), *IMAGE),
        CAMERAS[1]: lambda n: resize_with_pad(
            compressed_to_rgb(
                CompressedImage(
                    format="jpeg", data=cv2.imencode(".jpg", pattern(n)[:, :, ::-1])[1].tobytes()
                )
            ),
            *IMAGE,
        ),
    }
    matched_sent = 0
    for episode in data.episodes[:3]:
        n = episode.length
        assert n >= 5
        np.testing.assert_array_equal(
            episode.data["timestamp"], (np.arange(n) / 30).astype(np.float32)
        )
        times = episode.data["node_time"]
        assert (np.diff(times) > 0).all()
        for i, t in enumerate(times):
            # Images: the frame the camera published, as the model is sent it; never
            # one published after the frame's time, never one older than 0.5 s.
            for key in CAMERAS:
                image = episode.videos[f"observation.images.{key}"][i]
                number = pattern_index(image)
                published = frame_times[[m for _, m in frames].index(number)]
                assert published <= t and t - published < 0.5, (key, i)
                want = expected_image[key](number)
                assert mae(image, want) < MAX_MAE and psnr(image, want) > MIN_PSNR
            # State: exactly one joint state the test published, before the frame's time.
            state = episode.data["observation.state"][i]
            hits = [k for k, (_, p) in enumerate(joint_log) if np.array_equal(np.float32(p), state)]
            assert hits and joint_times[hits[0]] <= t and t - joint_times[hits[-1]] < 0.5, i
        # What the node sent is what was recorded for the same camera frame: each sent
        # image is exactly the node's conversion of its frame (above: each recorded
        # image is that conversion within codec loss); rows of the same frame compared.
        for _, images in sent:
            for key, rgb in images.items():
                number = pattern_index(rgb)
                np.testing.assert_array_equal(rgb, expected_image[key](number))
                column = episode.videos[f"observation.images.{key}"]
                rows = [i for i in range(n) if pattern_index(column[i]) == number]
                for i in rows:
                    assert mae(column[i], rgb) < MAX_MAE and psnr(column[i], rgb) > MIN_PSNR
                    matched_sent += 1
    recorded_numbers = sorted(
        {pattern_index(f) for e in data.episodes for f in e.videos["observation.images.base_0_rgb"]}
    )
    sent_numbers = [pattern_index(rgb) for _, images in sent for rgb in images.values()]
    assert sent_numbers and matched_sent >= 1, (sent_numbers, recorded_numbers)

    # Action while the policy commands: the position commanded at the frame's time.
    checked = 0
    for episode in (first, second):
        assert not episode.data["intervention"].any()
        for i, t in enumerate(episode.data["node_time"]):
            arm, gripper = _commanded(got, got.arm, t), _commanded(got, got.gripper, t)
            if arm is None or gripper is None:
                continue
            want = np.concatenate([arm, gripper]).astype(np.float32)
            np.testing.assert_allclose(episode.data["action"][i], want, atol=2e-5)
            checked += 1
    assert checked >= 5
    assert second.data["node_time"][-1] <= disabled_at + scaled(0.5)

    # Episode 2: the human segment (disabled) is labelled, its action the measured
    # position; then the policy again.
    flags = third.data["intervention"]
    switch = int(np.argmin(flags))
    assert flags[:switch].all() and not flags[switch:].any() and switch >= 5
    times = third.data["node_time"]
    assert times[switch - 1] <= enabled_at and times[switch] >= enable_sent
    np.testing.assert_array_equal(
        third.data["action"][:switch], third.data["observation.state"][:switch]
    )
    moved = third.data["observation.state"][switch - 1] - third.data["observation.state"][0]
    assert (moved > 0.001).all()  # the hand-moved arm, as published


def _start_node(tmp_path: Path, server_url: str, prefix: str, name: str, root: Path):
    """A real policy_node process recording into ``root``; its stderr into a file."""
    camera_map = tmp_path / "cams.yaml"
    camera_map.write_text(
        yaml.safe_dump(
            {
                CAMERAS[0]: {"topic": f"{prefix}/camera/base/image_raw"},
                CAMERAS[1]: {"topic": f"{prefix}/camera/wrist/image_raw/compressed"},
            }
        )
    )
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed by the caller
    code = "import sys; from relay_ros.entry_points import policy_node; sys.exit(policy_node())"
    process = subprocess.Popen(
        [
            sys.executable, "-c", code, "--ros-args",
            "--params-file", str(config_dir() / "pi05.yaml"),
            "-r", f"__node:={name}",
            "-p", f"policy_url:={server_url}",
            "-p", f"camera_map:={camera_map}",
            "-p", f"joint_states_topic:={prefix}/joint_states",
            "-p", f"outputs.arm.topic:={prefix}/arm_controller/joint_trajectory",
            "-p", f"outputs.gripper.topic:={prefix}/gripper_controller/joint_trajectory",
            "-p", f"record_dir:={root}",
            "-p", "record_fps:=10",
        ],
        stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    return process, log


def _recording_rig(ros_context, server, tmp_path: Path, root: Path, **overrides) -> CountingRig:
    return CountingRig(
        ros_context,
        server.url_template,
        tmp_path=tmp_path,
        overrides={"record_dir": str(root), "record_fps": 30, **overrides},
    )


@pytest.mark.slow
def test_an_executor_held_up_a_second_ends_no_episode(ros_context, tmp_path):
    """A recording tick a second late is what a loaded machine's executor does, not a
    jump of the node clock (it used to end the episode as "clock jump"): the episode
    goes on, the frames the tick missed are counted."""
    root = tmp_path / "ds"
    with (
        run_server_in_thread(ServerOptions(models=("pi05",), policy=SlowPolicy)) as server,
        _recording_rig(ros_context, server, tmp_path, root) as rig,
    ):
        recorder = rig.node.recording.recorder
        wait_until(lambda: (s := recorder.status()).episode == 0 and s.episode_frames >= 10)
        skipped = recorder.status().frames_skipped
        held: list[float] = []

        def hold_up() -> None:  # the fault: one callback holds the executor 1.3 s
            if not held:
                held.append(rig.now())
                time.sleep(1.3)

        rig.feeder.create_timer(0.01, hold_up)
        wait_until(lambda: held)
        frames = recorder.status().episode_frames
        wait_until(lambda: recorder.status().episode_frames >= frames + 45, timeout=20)
        status = recorder.status()
        assert status.episode == 0 and status.episodes == 0, status
        assert status.frames_skipped - skipped >= 30, status  # 1.3 s at 30 fps
        reply = rig.call(Trigger, "end_episode", Trigger.Request())
        assert reply.success and reply.message.startswith("episode 0 ends ("), reply.message
        wait_until(lambda: (root / "meta/episodes/chunk-000/file-000.parquet").exists(), timeout=20)
    assert [e.row["relay_ros/end_reason"] for e in load(root).episodes][0] == "end_episode"


@pytest.mark.slow
def test_a_jump_of_the_node_clock_ends_the_episode(ros_context, tmp_path):
    """use_sim_time, /clock forward 100 s: the frames' times are on the old timeline, so
    the episode ends ("clock jump") and the next one starts on the new time."""
    from test_clock_jumps import SimClock

    root = tmp_path / "ds"
    clock = SimClock(ros_context)
    with run_server_in_thread(ServerOptions(models=("pi05",), policy=SlowPolicy)) as server:
        rig = _recording_rig(ros_context, server, tmp_path, root, use_sim_time=True)
        rig.executor.add_node(clock.node)
        with rig:
            recorder = rig.node.recording.recorder
            wait_until(lambda: (s := recorder.status()).episode == 0 and s.episode_frames >= 10)
            clock.jump(100.0)
            wait_until(lambda: (s := recorder.status()).episode == 1 and s.episode_frames >= 10)
            wait_until(
                lambda: (root / "meta/episodes/chunk-000/file-000.parquet").exists(), timeout=20
            )
        clock.node.destroy_node()
    assert [e.row["relay_ros/end_reason"] for e in load(root).episodes][:2] == [
        "clock jump",
        "shutdown",
    ]


class Feeder:
    """Cameras and joint states for a policy_node process, from this process."""

    def __init__(self, context, prefix: str) -> None:
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import qos_profile_sensor_data

        self.node = Node(f"feeder_{prefix.strip('/')}", context=context)
        self._image = self.node.create_publisher(
            Image, f"{prefix}/camera/base/image_raw", qos_profile_sensor_data
        )
        self._jpeg = self.node.create_publisher(
            CompressedImage, f"{prefix}/camera/wrist/image_raw/compressed", qos_profile_sensor_data
        )
        self._joints = self.node.create_publisher(JointState, f"{prefix}/joint_states", 10)
        self._n = 0
        self.node.create_timer(1 / 30, self._cameras)
        self.node.create_timer(0.01, self._joint_states)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def _cameras(self) -> None:
        frame = pattern(self._n)
        self._n += 1
        h, w, _ = frame.shape
        self._image.publish(
            Image(height=h, width=w, encoding="rgb8", step=w * 3, data=frame.tobytes())
        )
        data = cv2.imencode(".jpg", frame[:, :, ::-1])[1].tobytes()
        self._jpeg.publish(CompressedImage(format="jpeg", data=data))

    def _joint_states(self) -> None:
        self._joints.publish(JointState(name=JOINTS, position=[0.1] * 7))

    def call(self, srv_type, service: str, request):
        client = self.node.create_client(srv_type, service)
        assert client.wait_for_service(timeout_sec=scaled(20))
        future = client.call_async(request)
        return wait_until(lambda: future.done() and future.result(), timeout=20)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=scaled(5))
        self.executor.shutdown(timeout_sec=scaled(5))
        self.node.destroy_node()


def _partial_videos(root: Path) -> list[Path]:
    """The non-empty videos of the episode being recorded (none between episodes)."""
    try:
        return [p for p in (root / STAGING_DIR).rglob("*.mp4") if p.stat().st_size > 0]
    except FileNotFoundError:  # the staging directory goes with each commit
        return []


@pytest.mark.slow
def test_kill_9_mid_episode_keeps_the_episodes_before_and_the_next_start_repairs(
    ros_context, tmp_path
):
    root = tmp_path / "ds"
    prefix = "/rec_kill"
    feeder = Feeder(ros_context, prefix)
    try:
        with run_server_in_thread(ServerOptions(models=("pi05",))) as server:
            process, log = _start_node(tmp_path, server.url_template, prefix, "rec_kill", root)
            try:
                reply = wait_until(
                    lambda: (
                        (
                            r := feeder.call(
                                SetBool, "/rec_kill/mark_episode", SetBool.Request(data=False)
                            )
                        ).success
                        and r
                    ),
                    timeout=60,
                )
                assert reply.message.startswith("episode 0 ends")
                row = root / "meta/episodes/chunk-000/file-000.parquet"
                wait_until(row.exists, timeout=30)
                # Episode 1 is being written when the process dies.
                wait_until(lambda: len(_partial_videos(root)) == 2, timeout=30)
                time.sleep(scaled(0.5))
                kept = {
                    p: p.read_bytes()
                    for p in root.rglob("*")
                    if p.is_file() and STAGING_DIR not in p.parts
                }
                process.send_signal(signal.SIGKILL)
                assert process.wait(timeout=scaled(10)) == -signal.SIGKILL
            finally:
                if process.poll() is None:
                    process.kill()
                log.close()
            assert (root / STAGING_DIR).exists()
            (episode,) = load(root).episodes  # the episode before is whole
            assert episode.row["success"] is False and episode.length >= 1
            assert {p: p.read_bytes() for p in kept} == kept
            check_dataset(
                root,
                cameras=CAMERAS,
                state_names=JOINTS,
                action_names=JOINTS,
                fps=10,
                image_size=IMAGE,
            )

            # The next start discards the partial episode, says so, and records on.
            process, log = _start_node(tmp_path, server.url_template, prefix, "rec_again", root)
            try:
                text = wait_until(
                    lambda: (
                        "recording into" in (t := (tmp_path / "rec_again.log").read_text()) and t
                    ),
                    timeout=60,
                )
                assert "discarded the unfinished episode from the last run" in text
                assert "(episode-000001, " in text and "recording into" in text
                assert not (root / STAGING_DIR).exists()
                wait_until(
                    lambda: "recording episode 1" in (tmp_path / "rec_again.log").read_text(),
                    timeout=60,
                )
                process.send_signal(signal.SIGINT)
                assert process.wait(timeout=scaled(30)) == 0
            finally:
                if process.poll() is None:
                    process.kill()
                log.close()
    finally:
        feeder.close()
    data = load(root)
    assert [e.row["relay_ros/end_reason"] for e in data.episodes] == ["mark_episode", "shutdown"]
    check_dataset(
        root, cameras=CAMERAS, state_names=JOINTS, action_names=JOINTS, fps=10, image_size=IMAGE
    )


def test_a_record_dir_that_is_not_a_dataset_stops_the_node_at_start(tmp_path):
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"x")
    code = "import sys; from relay_ros.entry_points import policy_node; sys.exit(policy_node())"
    done = subprocess.run(
        [
            sys.executable, "-c", code, "--ros-args",
            "--params-file", str(config_dir() / "pi05.yaml"),
            "-p", "policy_url:=ws://127.0.0.1:9/{model}",
            "-p", f"record_dir:={foreign}",
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2, lines
    assert len(lines) == 1 and lines[0].startswith("[FATAL] "), lines
    assert (
        f"record_dir '{foreign}' is not empty (['cat.jpg']) and has no meta/info.json" in lines[0]
    )


@pytest.mark.slow
def test_make_demo_record_writes_a_lerobot_dataset(tmp_path):
    root = tmp_path / "demo_ds"
    done = subprocess.run(
        [
            sys.executable, "-m", "relay_ros.demo", "--duration", "3", "--no-sync",
            "--record", str(root), "--output-dir", str(tmp_path),
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"recorded: {root} (one episode per run)" in done.stdout
    info = check_dataset(
        root, cameras=CAMERAS[:1] + ["left_wrist_0_rgb"], state_names=JOINTS, action_names=JOINTS,
        fps=15, image_size=IMAGE,
    )  # fmt: skip
    assert info["robot_type"] == "relay_ros_sim_arm" and info["total_episodes"] == 1
    (episode,) = load(root).episodes
    assert episode.length >= 5 and not episode.data["intervention"].any()
    assert episode.row["relay_ros/end_reason"] == "shutdown"


def _episode_row(root: Path, index: int) -> Path:
    return root / f"meta/episodes/chunk-000/file-{index:03d}.parquet"


@pytest.mark.slow
def test_lifecycle_transitions_end_and_start_episodes_and_a_new_configure_appends(
    ros_context, tmp_path
):
    """(a) deactivate ends the episode ('deactivate'), nothing is recorded while
    inactive, activate starts the next; (b) cleanup removes the recording's timers and
    services, and configure again rebuilds them and appends to the same dataset."""
    root = tmp_path / "ds"
    with (
        run_server_in_thread(ServerOptions(models=("pi05",), policy=SlowPolicy)) as server,
        CountingRig(
            ros_context,
            server.url_template,
            tmp_path=tmp_path,
            overrides={"autostart": False, "record_dir": str(root), "record_fps": 15},
        ) as rig,
    ):
        node = rig.node
        clock = rig.feeder.get_clock()

        def now() -> float:
            return clock.now().nanoseconds * 1e-9

        def episode_services() -> list[str]:
            names = [s.service_name for s in node.services]
            return [n for n in names if n.endswith(("/mark_episode", "/end_episode"))]

        def recording_ticks_pass(count: int) -> None:
            ticks = node.recording.tick_time
            seen = ticks.count
            wait_until(lambda: ticks.count >= seen + count, timeout=10)

        timers_unconfigured = len(list(node.timers))
        assert episode_services() == []
        assert rig.change_state("configure")
        assert len(episode_services()) == 2
        recorder = node.recording.recorder
        wait_until(lambda: node.core.server is not None, timeout=10)
        recording_ticks_pass(15)  # a second of recording ticks while inactive
        assert recorder.status().episode is None and recorder.status().episodes == 0
        status = wait_until(lambda: (s := rig.recording_status()) and s, timeout=10)
        assert status["message"] == "not recording: the node is not active"

        windows = []
        for index in (0, 1):
            activated = now()
            assert rig.change_state("activate")
            wait_until(
                lambda index=index: (
                    (s := recorder.status()).episode == index and s.episode_frames >= 10
                ),
                timeout=20,
            )
            assert rig.change_state("deactivate")
            windows.append((activated, now()))  # (taken once the transition is done)
            wait_until(_episode_row(root, index).exists, timeout=20)
            recording_ticks_pass(15)  # inactive: no frame, no new episode
            status = recorder.status()
            assert (status.episode, status.episodes, status.queued) == (None, index + 1, 0)

        # cleanup: the recording's timers and services are gone with the configuration.
        assert rig.change_state("cleanup")
        assert episode_services() == [] and len(list(node.timers)) == timers_unconfigured
        # configure again, the same record_dir: rebuilt, and the dataset grows.
        assert rig.change_state("configure") and rig.change_state("activate")
        assert node.transition_error == "" and len(episode_services()) == 2
        recorder = node.recording.recorder
        activated = now()
        wait_until(
            lambda: (s := recorder.status()).episode == 2 and s.episode_frames >= 10, timeout=20
        )
        reply = rig.call(SetBool, "mark_episode", SetBool.Request(data=True))
        assert reply.success and reply.message.startswith("episode 2 ends ("), reply.message
        windows.append((activated, now()))
        wait_until(_episode_row(root, 2).exists, timeout=20)

    data = load(root)
    reasons = [e.row["relay_ros/end_reason"] for e in data.episodes]
    # (After the mark the active node records on: the rig's end shuts that one down.)
    assert reasons[:3] == ["deactivate", "deactivate", "mark_episode"], reasons
    assert reasons[3:] in ([], ["shutdown"]), reasons
    for episode, (start, end) in zip(data.episodes, windows):
        times = episode.data["node_time"]
        assert start <= times[0] and times[-1] <= end, (start, times[0], times[-1], end)
        assert episode.length >= 10 and not episode.data["intervention"].any()
    check_dataset(
        root, cameras=CAMERAS, state_names=JOINTS, action_names=JOINTS, fps=15, image_size=IMAGE
    )


@pytest.mark.slow
def test_a_shutdown_of_an_active_node_ends_the_episode_as_shutdown(ros_context, tmp_path):
    """(c) ``ros2 lifecycle set <node> shutdown`` while active: the episode ends as
    'shutdown' and is written before the node is finalized."""
    root = tmp_path / "ds"
    with (
        run_server_in_thread(ServerOptions(models=("pi05",), policy=SlowPolicy)) as server,
        CountingRig(
            ros_context,
            server.url_template,
            tmp_path=tmp_path,
            overrides={"record_dir": str(root), "record_fps": 15},
        ) as rig,
    ):
        recorder = rig.node.recording.recorder
        wait_until(
            lambda: (s := recorder.status()).episode == 0 and s.episode_frames >= 10, timeout=30
        )
        assert rig.change_state("shutdown") and rig.get_state() == "finalized"
        assert _episode_row(root, 0).exists()  # written by the time shutdown answered
    (episode,) = load(root).episodes
    assert episode.row["relay_ros/end_reason"] == "shutdown" and episode.length >= 10
