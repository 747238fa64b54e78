"""Recording as LeRobot datasets, without ROS: the format, the frames, the failures.

Every dataset written here is read back with pyarrow and PyAV (test/lerobot_reader.py)
and checked against LeRobot's v3.0 layout as transcribed from its code
(test/lerobot_reference.py). Bags are real rosbag2 files written with rosbags;
a full disk is a real kernel refusal (RLIMIT_FSIZE in a subprocess).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from frame_patterns import pattern, pattern_index
from lerobot_reader import load, mae, psnr
from lerobot_reference import LIBSVTAV1_DEFAULTS, check_dataset

from relay_ros.bag.export import ExportError, export
from relay_ros.bag.writer import BagWriter
from relay_ros.node.node_config import config_from_parameters
from relay_ros.paths import config_dir
from relay_ros.pipeline.camera_map import CameraEntry
from relay_ros.pipeline.frame_source import LatestFrame
from relay_ros.pipeline.images import resize_with_pad
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.recording.dataset import STAGING_DIR, Dataset, DatasetError
from relay_ros.recording.episode import EpisodeContext
from relay_ros.recording.frames import FrameAssembler, SharedFrameSource, Skip
from relay_ros.recording.plan import plan_recording
from relay_ros.recording.recorder import EndedEpisode, Recorder
from relay_ros.recording.stats import PixelStats, RunningQuantileStats, feature_stats
from relay_ros.recording.video import probe_video_info, video_info
from relay_ros.server.metadata import build_metadata

JOINTS = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper_joint"]
CAMERAS = ["base_0_rgb", "left_wrist_0_rgb"]
IMAGE = (224, 224)
# Within codec loss: AV1 at LeRobot's crf 30 on these synthetic frames gives a mean
# absolute error of 1-4 levels and 31-40 dB (measured); the bounds leave room.
MAX_MAE = 6.0
MIN_PSNR = 28.0


def _config(tmp_path: Path, **params: object):
    base = yaml.safe_load((config_dir() / "pi05.yaml").read_text())["/**"]["ros__parameters"]
    base.update({"record_dir": str(tmp_path / "ds"), **params})
    return config_from_parameters(base)


def _plan(tmp_path: Path, **params: object):
    cameras = [
        CameraEntry(CAMERAS[0], "/cam/base", "raw", "reliable"),
        CameraEntry(CAMERAS[1], "/cam/wrist", "raw", "reliable"),
    ]
    spec = ServerSpec.from_metadata(build_metadata("pi05"), model="pi05")
    return plan_recording(_config(tmp_path, **params), cameras, spec)


def _logger(records: list[str]) -> logging.Logger:
    logger = logging.getLogger(f"test.recording.{len(records)}.{id(records)}")

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger.handlers = [Keep()]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def _record(plan, root: Path, episodes: list[int], *, log=None, queue_frames=1000, block=True):
    """Episodes of ``n`` frames each, frame k of episode e showing pattern(e*50 + k)
    and state/action ramps; returns what was fed."""
    log = log or _logger([])
    recorder = Recorder(
        Dataset(root, log=log),
        settings=plan.video,
        log=log,
        block=block,
        queue_frames=queue_frames,
        context=EpisodeContext(source="test", config_json='{"a": 1}', adapter="my_adapter"),
    )
    recorder.set_layout(plan.layout, plan.converter())
    assembler = plan.assembler()
    fed = []
    t = 1000.0
    for e, n in enumerate(episodes):
        for k in range(n):
            t += 1.0 / plan.layout.fps
            for key in CAMERAS:
                assembler.frame(key, pattern(e * 50 + k), t - 0.001)
            assembler.joint_state(JOINTS, [0.01 * k + 0.001 * j for j in range(7)], t - 0.002)
            sample = assembler.sample(
                t,
                commanded=np.full(7, 0.5 + 0.01 * k),
                intervention=k % 2 == 1,
                task=f"task {e % 2}",
            )
            assert not isinstance(sample, Skip), sample
            fed.append((e, k, sample))
            recorder.offer(sample)
        recorder.end_episode("test", success=e == 0)
    assert recorder.close()
    return fed, recorder


def _samples(plan, n: int, t0: float) -> list:
    """``n`` frame samples of the plan's layout from ``t0`` on."""
    assembler = plan.assembler()
    samples = []
    for k in range(n):
        t = t0 + (k + 1) / plan.layout.fps
        for key in CAMERAS:
            assembler.frame(key, pattern(k), t - 0.001)
        assembler.joint_state(JOINTS, [0.01 * k] * 7, t - 0.002)
        sample = assembler.sample(t, commanded=np.full(7, 0.5), intervention=False, task="t")
        assert not isinstance(sample, Skip), sample
        samples.append(sample)
    return samples


def test_end_episode_names_the_episode_it_ends_whatever_the_worker_has_written(tmp_path):
    """The reply of ~/mark_episode comes from what end_episode returns: decided with the
    queue, so a frame the worker has popped but not begun an episode with, or an end it
    has not written yet, never makes it say "no episode" or name the episode before
    (under load, a retried mark ended two episodes, both replied as episode 0)."""
    plan = _plan(tmp_path)
    root = tmp_path / "ds"
    log = _logger([])
    recorder = Recorder(Dataset(root, log=log), settings=plan.video, log=log, block=True)
    assert recorder.end_episode("before any frame") is None
    recorder.set_layout(plan.layout, plan.converter())
    for sample in _samples(plan, 3, 1000.0):
        recorder.offer(sample)
    assert recorder.end_episode("first", success=False) == EndedEpisode(index=0, frames=3)
    assert recorder.end_episode("again at once") is None
    for sample in _samples(plan, 2, 1010.0):
        recorder.offer(sample)
    assert recorder.end_episode("second") == EndedEpisode(index=1, frames=2)
    assert recorder.close()
    assert [e.length for e in load(root).episodes] == [3, 2]
    # Reopened: frames before the layout are not kept, then the indices go on from the
    # dataset's episodes.
    recorder = Recorder(Dataset(root, log=log), settings=plan.video, log=log, block=True)
    for sample in _samples(plan, 1, 1015.0):
        recorder.offer(sample)
    assert recorder.end_episode("no layout yet") is None
    recorder.set_layout(plan.layout, plan.converter())
    for sample in _samples(plan, 1, 1020.0):
        recorder.offer(sample)
    assert recorder.end_episode("third") == EndedEpisode(index=2, frames=1)
    assert recorder.close()
    assert [e.length for e in load(root).episodes] == [3, 2, 1]


# --------------------------------------------------------------------------- the format


def test_dataset_matches_lerobot_v3_layout_and_reads_back(tmp_path):
    plan = _plan(tmp_path)
    root = tmp_path / "ds"
    fed, recorder = _record(plan, root, [12, 7])
    info = check_dataset(
        root, cameras=CAMERAS, state_names=JOINTS, action_names=JOINTS, fps=15, image_size=IMAGE
    )
    for key in CAMERAS:
        ft = info["features"][f"observation.images.{key}"]
        assert {k: ft["info"][k] for k in LIBSVTAV1_DEFAULTS} == LIBSVTAV1_DEFAULTS
    assert info["total_episodes"] == 2 and info["total_frames"] == 19 and info["total_tasks"] == 2
    data = load(root)
    assert data.tasks == ["task 0", "task 1"]
    for e, episode in enumerate(data.episodes):
        mine = [s for ep, _, s in fed if ep == e]
        n = len(mine)
        assert episode.length == n and len(episode.data["frame_index"]) == n
        assert episode.data["frame_index"].tolist() == list(range(n))
        np.testing.assert_array_equal(
            episode.data["timestamp"], (np.arange(n) / 15).astype(np.float32)
        )
        np.testing.assert_array_equal(episode.data["node_time"], [s.time for s in mine])
        np.testing.assert_array_equal(
            episode.data["observation.state"], np.array([s.state for s in mine], np.float32)
        )
        np.testing.assert_array_equal(
            episode.data["action"], np.array([s.action for s in mine], np.float32)
        )
        assert episode.data["intervention"].tolist() == [k % 2 == 1 for k in range(n)]
        assert set(episode.data["task_index"].tolist()) == {e}
        for key in CAMERAS:
            frames = episode.videos[f"observation.images.{key}"]
            assert frames.shape == (n, *IMAGE, 3)
            np.testing.assert_allclose(
                episode.video_times[f"observation.images.{key}"], np.arange(n) / 15, atol=1e-6
            )
            for k in range(n):
                want = resize_with_pad(pattern(e * 50 + k), *IMAGE)
                assert pattern_index(frames[k]) == e * 50 + k
                assert mae(frames[k], want) < MAX_MAE and psnr(frames[k], want) > MIN_PSNR
        row = episode.row
        assert row["success"] is (e == 0) and row["adapter"] == "my_adapter"
        assert row["relay_ros/end_reason"] == "test" and row["relay_ros/frames_dropped"] == 0
        assert json.loads(row["relay_ros/config"]) == {"a": 1}
        assert row["relay_ros/start_time"] == mine[0].time
    # The stored stream is what info.json says it is.
    video = root / "videos/observation.images.base_0_rgb/chunk-000/file-000.mp4"
    probed = probe_video_info(video)
    assert probed == {
        k: info["features"]["observation.images.base_0_rgb"]["info"][k] for k in probed
    }
    assert recorder.status().episodes == 2


def test_stats_are_lerobots(tmp_path):
    """Pixel statistics from level counts equal one RunningQuantileStats update with all
    the pixels (LeRobot's streaming encoder); a column's statistics have LeRobot's shapes."""
    rng = np.random.default_rng(3)
    frames = [rng.integers(0, 256, (40, 60, 3), dtype=np.uint8) for _ in range(5)]
    pixels = PixelStats()
    running = RunningQuantileStats()
    for frame in frames:
        pixels.update(frame)
    running.update(np.concatenate([f.reshape(-1, 3) for f in frames]))
    a, b = pixels.statistics(), running.statistics()
    assert list(a) == list(b)
    for key in a:
        scale = 1 if key == "count" else 255.0
        np.testing.assert_allclose(a[key].ravel(), b[key].ravel() / scale, rtol=1e-5, atol=1e-6)
        assert a[key].shape == ((1,) if key == "count" else (3, 1, 1))
    one = feature_stats(np.array([0.5], np.float32))  # one frame: quantiles are the mean
    assert {k: v.tolist() for k, v in one.items()}["q99"] == [0.5]
    vector = feature_stats(np.arange(12, dtype=np.float32).reshape(6, 2))
    assert vector["mean"].tolist() == [5.0, 6.0] and vector["count"].tolist() == [6]


def test_video_info_predicts_the_stream(tmp_path):
    plan = _plan(tmp_path, record_video_codec="h264")
    _record(plan, tmp_path / "ds", [3])
    probed = probe_video_info(
        tmp_path / "ds/videos/observation.images.base_0_rgb/chunk-000/file-000.mp4"
    )
    predicted = video_info(plan.video, IMAGE, 15)
    assert probed == {k: predicted[k] for k in probed}
    assert predicted["video.codec"] == "h264" and predicted["video.preset"] is None


# --------------------------------------------------------------------------- frames


def test_assembler_takes_the_newest_inputs_at_or_before_the_frame_time():
    assembler = FrameAssembler(["a"], ["j1", "j2"], ["j1", None, "j2"], ["j2", "j1"], 0.5)
    assert assembler.sample(1.0, commanded=None, intervention=False, task="t") == Skip(
        "no frame from camera 'a' yet"
    )
    assembler.frame("a", "f1", 1.0)
    assembler.frame("a", "f2", 1.05)
    assembler.joint_state(["j1", "j2", "other"], [1.0, 2.0, 9.0], 0.99)
    assembler.joint_state(["j1"], [1.5], 1.0)  # exactly at the frame time: taken
    assembler.joint_state(["j1", "j2"], [3.0, 4.0], 1.01)  # after it: never
    sample = assembler.sample(1.0, commanded=None, intervention=True, task="t")
    assert sample.images == {"a": "f1"} and sample.image_times == {"a": 1.0}
    assert sample.state.tolist() == [1.5, 2.0]
    assert sample.action.tolist() == [1.5, 0.0, 2.0]  # measured; dim 1 drives nothing
    commanded = assembler.sample(1.06, commanded=np.array([7.0, 8.0]), intervention=False, task="t")
    assert commanded.images == {"a": "f2"} and commanded.action.tolist() == [8.0, 0.0, 7.0]
    assert assembler.sample(1.6, commanded=None, intervention=False, task="t") == Skip(
        "camera 'a' is stale (0.550 s old)"
    )
    assembler.frame("a", "f3", 1.6)
    assert assembler.sample(1.6, commanded=None, intervention=False, task="t") == Skip(
        "joint 'j1' is stale (0.590 s old)"
    )
    assembler.joint_state(["j1", "j2"], [float("nan"), 1.0], 1.6)
    assert assembler.sample(1.6, commanded=None, intervention=False, task="t") == Skip(
        "joint 'j1' is nan"
    )


def test_shared_frame_source_gives_each_reader_every_frame_once():
    source = LatestFrame()
    shared = SharedFrameSource(source)
    assert shared.take_newest(0.0) is None and shared.take_for_recording(0.0) is None
    source.put("a", 1.0)
    assert shared.take_for_recording(1.0).msg == "a"  # the recorder reads first
    assert shared.take_for_recording(1.1) is None
    assert shared.take_newest(1.2).msg == "a"  # the core still gets it
    assert shared.take_newest(1.3) is None
    source.put("b", 2.0)
    source.put("c", 2.1)  # the source keeps only its newest
    assert shared.take_newest(2.2).msg == "c"
    assert shared.take_for_recording(2.3).msg == "c"


# --------------------------------------------------------------------------- queue


def test_a_full_queue_drops_frames_and_counts_them(tmp_path):
    plan = _plan(tmp_path)
    log: list[str] = []
    fed, recorder = _record(
        plan, tmp_path / "ds", [150], log=_logger(log), queue_frames=2, block=False
    )
    status = recorder.status()
    (episode,) = load(tmp_path / "ds", videos=False).episodes
    assert status.frames_dropped > 0
    assert episode.length + episode.row["relay_ros/frames_dropped"] == 150
    assert episode.length + status.frames_dropped == 150
    assert any("recording misses frames" in line and "dropped" in line for line in log)
    # What was kept is what was offered, in order, without gaps in the index.
    kept = {s.time: s for _, _, s in fed}
    for t, state in zip(episode.data["node_time"], episode.data["observation.state"]):
        np.testing.assert_array_equal(state, kept[t].state.astype(np.float32))


# --------------------------------------------------------------------------- crashes


def test_reopening_repairs_metadata_and_discards_what_was_never_committed(tmp_path):
    plan = _plan(tmp_path)
    root = tmp_path / "ds"
    _record(plan, root, [6, 5])
    committed = {
        p: p.read_bytes() for p in root.rglob("*") if p.is_file() and "meta" not in p.parts
    }
    # A run killed (1) while recording episode 2, (2) between moving episode 2's files
    # into place and committing its row, (3) before rewriting info.json and stats.json.
    staging = root / STAGING_DIR / "episode-000002"
    staging.mkdir(parents=True)
    (staging / "camera-0.mp4").write_bytes(b"\x00" * 1000)
    orphan = root / "data/chunk-000/file-002.parquet"
    orphan.write_bytes(b"PAR1 half-written")
    orphan_video = root / "videos/observation.images.base_0_rgb/chunk-000/file-002.mp4"
    orphan_video.write_bytes(b"\x00" * 10)
    info = json.loads((root / "meta/info.json").read_text())
    info["total_episodes"] = 1
    (root / "meta/info.json").write_text(json.dumps(info))
    (root / "meta/stats.json").unlink()
    log: list[str] = []
    dataset = Dataset(root, log=_logger(log))
    assert dataset.episodes == 2 and dataset.frames == 11
    assert not (root / STAGING_DIR).exists() and not orphan.exists() and not orphan_video.exists()
    assert any(
        "discarded the unfinished episode" in line and "episode-000002" in line for line in log
    )
    assert any("deleted 'data/chunk-000/file-002.parquet'" in line for line in log)
    assert any("repaired ['meta/info.json', 'meta/stats.json']" in line for line in log)
    assert {p: p.read_bytes() for p in committed} == committed  # the episodes untouched
    check_dataset(
        root, cameras=CAMERAS, state_names=JOINTS, action_names=JOINTS, fps=15, image_size=IMAGE
    )
    # A dataset in order is opened without a word about repairs.
    quiet: list[str] = []
    Dataset(root, log=_logger(quiet))
    assert quiet == [f"recording into '{root}': 2 episode(s), 11 frame(s) so far"]


def test_another_layout_or_a_foreign_directory_is_refused(tmp_path):
    plan = _plan(tmp_path)
    _record(plan, tmp_path / "ds", [3])
    other = _plan(tmp_path, record_fps=30)
    dataset = Dataset(tmp_path / "ds", log=_logger([]))
    with pytest.raises(DatasetError) as info:
        dataset.use_layout(other.layout)
    assert "fps 15 -> 30" in str(info.value) and "choose a new record_dir" in str(info.value)
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"x")
    with pytest.raises(
        DatasetError, match=r"is not empty \(\['cat.jpg'\]\) and has no meta/info.json"
    ):
        Dataset(foreign, log=_logger([]))


_DISK_FULL_CHILD = textwrap.dedent(
    """
    import json, logging, resource, signal, sys
    import numpy as np
    sys.path.insert(0, {test_dir!r})
    from test_recording import _plan, _logger, pattern, CAMERAS, JOINTS
    from relay_ros.recording.dataset import Dataset
    from relay_ros.recording.recorder import Recorder
    from pathlib import Path
    tmp = Path({tmp!r})
    plan = _plan(tmp)
    log = []
    recorder = Recorder(Dataset(tmp / "ds", log=_logger(log)), settings=plan.video,
                        log=_logger(log), block=True)
    recorder.set_layout(plan.layout, plan.converter())
    assembler = plan.assembler()
    def episode(first, n):
        for k in range(n):
            t = first + k / 15
            for key in CAMERAS:
                rng = np.random.default_rng(k)
                assembler.frame(key, rng.integers(0, 256, (224, 224, 3), dtype=np.uint8), t)
            assembler.joint_state(JOINTS, [0.0] * 7, t)
            recorder.offer(assembler.sample(t, commanded=None, intervention=True, task="t"))
        recorder.end_episode("test")
        recorder.wait_idle(60)
    episode(10.0, 5)  # committed before the disk fills
    # From now on no file may grow past 200 kB: the kernel refuses the write (EFBIG).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
    episode(20.0, 60)  # noise frames: the video outgrows the limit
    status = recorder.status()
    last = assembler.sample(30.0, commanded=None, intervention=True, task="t")
    offered_after = recorder.offer(last)
    print(json.dumps({{"state": status.state, "error": status.error, "episodes": status.episodes,
                       "offered_after": offered_after, "log": log}}))
    """
)


@pytest.mark.slow
def test_a_full_disk_stops_recording_and_keeps_the_episodes_before(tmp_path):
    child = _DISK_FULL_CHILD.format(test_dir=str(Path(__file__).parent), tmp=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["state"] == "stopped" and result["episodes"] == 1
    assert result["error"].startswith("recording stopped: the disk is full at ")
    assert "File too large" in result["error"] and "commanding continues" in result["error"]
    assert result["offered_after"] is False
    assert any(line == result["error"] for line in result["log"])
    assert not (tmp_path / "ds" / STAGING_DIR).exists()  # the partial episode freed its space
    (episode,) = load(tmp_path / "ds").episodes
    assert episode.length == 5
    check_dataset(
        tmp_path / "ds",
        cameras=CAMERAS,
        state_names=JOINTS,
        action_names=JOINTS,
        fps=15,
        image_size=IMAGE,
    )


# --------------------------------------------------------------------------- export

TYPES = {
    "/cam/base": "sensor_msgs/msg/Image",
    "/cam/wrist/compressed": "sensor_msgs/msg/CompressedImage",
    "/joint_states": "sensor_msgs/msg/JointState",
}
T0_NS = 1_800_000_000_000_000_000


def _write_bag(path: Path, events: list[tuple[float, str, object]]) -> None:
    """``(seconds after T0, topic, payload)``: an RGB array for the cameras (the wrist
    one JPEG-encoded), a joint1 value for the joint states (the others 0.1*j)."""
    with BagWriter(path, storage="mcap") as writer:
        store = writer.typestore
        for topic, msgtype in TYPES.items():
            writer.add_topic(topic, msgtype)
        for t, topic, payload in sorted(events, key=lambda e: e[0]):
            ns = T0_NS + round(t * 1e9)
            stamp = store.types["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)
            header = store.types["std_msgs/msg/Header"](stamp=stamp, frame_id="")
            if topic == "/joint_states":
                msg = store.types["sensor_msgs/msg/JointState"](
                    header=header,
                    name=JOINTS,
                    position=np.array([payload] + [0.1 * j for j in range(1, 7)], np.float64),
                    velocity=np.zeros(0),
                    effort=np.zeros(0),
                )
            elif topic == "/cam/base":
                rgb = np.asarray(payload)
                msg = store.types["sensor_msgs/msg/Image"](
                    header=header, height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8",
                    is_bigendian=0, step=rgb.shape[1] * 3, data=rgb.reshape(-1),
                )  # fmt: skip
            else:
                jpeg = cv2.imencode(".jpg", np.asarray(payload)[:, :, ::-1])[1].reshape(-1)
                msg = store.types["sensor_msgs/msg/CompressedImage"](
                    header=header, format="jpeg", data=jpeg
                )
            writer.write(topic, ns, writer.serialize(msg, TYPES[topic]))


def _export_params(tmp_path: Path) -> Path:
    cameras = tmp_path / "cams.yaml"
    cameras.write_text(
        yaml.safe_dump(
            {
                CAMERAS[0]: {"topic": "/cam/base"},
                CAMERAS[1]: {"topic": "/cam/wrist/compressed"},
            }
        )
    )
    return cameras


def _seconds(t: float) -> float:
    """Bag time (s) of an event ``t`` s after T0, as the exporter computes it."""
    return (T0_NS + round(t * 1e9)) * 1e-9


def test_export_is_causal_on_a_bag_with_known_timing(tmp_path):
    """Frames every 1/10 s from the first message; each takes the newest camera frame
    and joint state received at or before its time, never a later one (camera frames
    arrive 2 ms before, 0.5 ms after and 1 ms after the frame times)."""
    fps = 10
    events: list[tuple[float, str, object]] = []
    images: list[tuple[float, int]] = []
    offsets = [-0.002, 0.0005, 0.001]
    for n in range(29):
        t = (n + 1) / fps + offsets[n % 3]
        images.append((_seconds(t), n))
        events.append((t, "/cam/base", pattern(n)))
        events.append((t, "/cam/wrist/compressed", pattern(n)))
    # Joint states at irregular times and on the frame grid; joint1 = when received.
    joints = sorted({round(j * 0.013, 6) for j in range(235)} | {k / fps for k in range(30)})
    events += [(t, "/joint_states", t) for t in joints]
    _write_bag(tmp_path / "bag", events)
    result = export(
        tmp_path / "bag",
        tmp_path / "ds",
        camera_map=_export_params(tmp_path),
        overrides={"joint_states_topic": "/joint_states", "record_fps": fps, "prompt": "fold it"},
    )
    (episode,) = load(tmp_path / "ds").episodes
    times = episode.data["node_time"]
    # From the first message (a joint state at T0) every 1/fps up to the last message
    # (3.042 s); frame 0 had no camera frame yet.
    assert result.frames == episode.length == 30
    np.testing.assert_allclose(times - _seconds(0.0), np.arange(1, 31) / fps, atol=1e-6)
    after = 0
    for i, t in enumerate(times):
        newest = max(j for j in joints if _seconds(j) <= t)
        assert episode.data["observation.state"][i][0] == np.float32(newest)
        assert episode.data["action"][i][0] == np.float32(newest)  # measured: teleoperation
        frame = max(n for received, n in images if received <= t)
        after += any(t < received <= t + 0.0011 for received, _ in images)
        for key in CAMERAS:
            assert pattern_index(episode.videos[f"observation.images.{key}"][i]) == frame, (i, t)
    assert after >= 15  # frames whose next camera frame came within 1.1 ms after them
    assert episode.data["intervention"].all()
    assert (
        episode.row["tasks"] == ["fold it"] and episode.row["relay_ros/end_reason"] == "end of bag"
    )


def test_export_of_a_recorded_bag_matches_the_layout_and_the_bag(tmp_path):
    from make_fixture_bags import BASE_TOPIC, DROPOUT, JOINT_TOPIC, WRIST_TOPIC, make_bags

    from relay_ros.bag.reader import BagReader

    bags = make_bags(tmp_path / "bags", seconds=4.0, storages=("mcap", "sqlite3"))
    cameras = tmp_path / "cams.yaml"
    cameras.write_text(
        yaml.safe_dump({CAMERAS[0]: {"topic": BASE_TOPIC}, CAMERAS[1]: {"topic": WRIST_TOPIC}})
    )
    progress = []
    for storage in ("mcap", "sqlite3"):  # two bags, two episodes of one dataset
        export(
            bags[storage],
            tmp_path / "ds",
            camera_map=cameras,
            overrides={"joint_states_topic": JOINT_TOPIC},
            progress=progress.append,
        )
    check_dataset(
        tmp_path / "ds",
        cameras=CAMERAS,
        state_names=JOINTS,
        action_names=JOINTS,
        fps=15,
        image_size=IMAGE,
    )
    assert progress[-1].bag_s == progress[-1].duration_s
    with BagReader(bags["mcap"]) as reader:
        recorded = [
            (m.timestamp_ns * 1e-9, reader.deserialize(m)) for m in reader.messages([JOINT_TOPIC])
        ]
    times = np.array([t for t, _ in recorded])
    first, second = load(tmp_path / "ds").episodes
    for key in ("observation.state", "action", "intervention", "node_time"):
        np.testing.assert_array_equal(first.data[key], second.data[key])
    # The cameras are silent for 1 s: frames older than sensor_timeout_s (0.5 s) are not taken.
    gap = (DROPOUT[1] - DROPOUT[0]) - 0.5
    assert first.row["relay_ros/frames_dropped"] == pytest.approx(gap * 15, abs=2)
    for i, t in enumerate(first.data["node_time"]):
        _, msg = recorded[int(np.searchsorted(times, t, side="right")) - 1]
        want = np.array([dict(zip(msg.name, msg.position))[j] for j in JOINTS], np.float32)
        np.testing.assert_array_equal(first.data["observation.state"][i], want)
        np.testing.assert_array_equal(first.data["action"][i], want)
    assert first.data["intervention"].all()
    assert (np.diff(first.data["node_time"]) > 0).all()


def test_export_refuses_a_bag_that_does_not_fit(tmp_path):
    _write_bag(tmp_path / "bag", [(0.0, "/joint_states", 0.0)])
    camera_map = _export_params(tmp_path)
    with pytest.raises(
        ExportError, match=r"gave no frame: .*no frame from camera 'base_0_rgb' yet"
    ):
        export(
            tmp_path / "bag",
            tmp_path / "ds",
            camera_map=camera_map,
            overrides={"joint_states_topic": "/joint_states"},
        )
    with pytest.raises(ExportError, match=r"has no topic \['/elsewhere/joint_states'\]"):
        export(
            tmp_path / "bag",
            tmp_path / "ds2",
            camera_map=camera_map,
            overrides={"joint_states_topic": "/elsewhere/joint_states"},
        )
    _record(_plan(tmp_path, record_fps=30), tmp_path / "other", [2])
    events = [(k * 0.05, "/cam/base", pattern(k)) for k in range(5)]
    events += [(k * 0.05, "/cam/wrist/compressed", pattern(k)) for k in range(5)]
    events += [(k * 0.01, "/joint_states", 0.0) for k in range(25)]
    _write_bag(tmp_path / "bag2", events)
    with pytest.raises(ExportError, match=r"another layout \(fps 30 -> 15\)"):
        export(
            tmp_path / "bag2",
            tmp_path / "other",
            camera_map=camera_map,
            overrides={"joint_states_topic": "/joint_states"},
        )
    assert len(list((tmp_path / "other/meta/episodes").glob("*/*.parquet"))) == 1


def test_export_cli_prints_progress_and_the_episode(tmp_path):
    events = [(k * 0.05, "/cam/base", pattern(k)) for k in range(40)]
    events += [(k * 0.05, "/cam/wrist/compressed", pattern(k)) for k in range(40)]
    events += [(k * 0.01, "/joint_states", k * 0.01) for k in range(200)]
    _write_bag(tmp_path / "bag", events)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [
            sys.executable, "-m", "relay_ros.cli", "export", str(tmp_path / "bag"),
            str(tmp_path / "ds"), "--camera-map", str(_export_params(tmp_path)),
            "-p", "joint_states_topic:=/joint_states", "-p", "record_fps:=20",
        ],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "episode 0: 40 frames"
    assert "[100.0%] bag    1.99 / 1.99 s | frames    40" in done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "relay_ros.cli", "export", str(tmp_path / "no"), "out"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.startswith("relay-ros export: error: ")
    assert bad.stderr.count("\n") == 1
