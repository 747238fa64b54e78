"""The recorder thread: frames in through a bounded queue, episodes out to the dataset.

The caller (policy_node's executor thread, or a bag export) only hands over frame
samples (:meth:`Recorder.offer`, a few microseconds) and episode ends
(:meth:`Recorder.end_episode`); one worker thread does everything slow: converting
each camera's message into the image the model is sent
(:class:`FrameConverter`), encoding the videos, and committing each finished
episode (:class:`~relay_ros.recording.dataset.Dataset`).

- **Never blocks commanding.** A live recorder's queue holds at most
  ``queue_frames`` frames; when the worker cannot keep up, :meth:`Recorder.offer`
  drops the frame and returns False. Drops (and frames the caller skipped for want
  of fresh inputs, :meth:`Recorder.missed`) are counted per episode
  (``relay_ros/frames_dropped``) and in :meth:`Recorder.status`; the worker logs them
  at most every 5 s. Episode ends are never dropped. An export's recorder waits for
  room instead (``block=True``): there, no frame may be lost.
- **Stops, never crashes.** A full disk, a dataset of another layout, or any other
  failure stops recording: the staged episode is discarded (freeing its space), the
  reason is logged once as an error and stays in :meth:`Recorder.status`; offers
  are refused from then on. Episodes committed before stay readable.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from relay_ros.pipeline.camera_frames import CameraFrames, FrameConversionError
from relay_ros.pipeline.camera_map import CameraEntry
from relay_ros.pipeline.image_encoding import DEFAULT_JPEG_QUALITY, decode_jpeg
from relay_ros.recording.dataset import Dataset, is_disk_full
from relay_ros.recording.episode import EpisodeBuffer, EpisodeContext, EpisodeEnd, RecordedFrame
from relay_ros.recording.frames import FrameSample
from relay_ros.recording.lerobot_format import DatasetLayout
from relay_ros.recording.video import VideoSettings

__all__ = ["EndedEpisode", "FrameConverter", "Recorder", "RecorderStatus"]

# Drops are logged at most this often (s, wall clock).
_DROP_LOG_PERIOD_S = 5.0


#: Nice value of the recorder thread and of the encoder threads it starts (Linux).
BACKGROUND_NICE = 10


def background_priority() -> None:
    """Put the calling thread under the normal scheduler at nice :data:`BACKGROUND_NICE`;
    threads it starts afterwards (SVT-AV1's and x264's workers) inherit that. Lowering
    needs no permission; where the platform has no per-thread priorities, nothing
    changes."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # 0: this thread
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)


class Logger(Protocol):
    """Where the recorder reports (a ``logging.Logger`` or rclpy's node logger)."""

    def info(self, message: str) -> Any: ...
    def warning(self, message: str) -> Any: ...
    def error(self, message: str) -> Any: ...


class FrameConverter:
    """Each camera's message into the image the model is sent: decoded, fitted into
    ``image_size`` with openpi's ``resize_with_pad``, and with ``encoding="jpeg"``
    JPEG-encoded and decoded as the server decodes it (the node's own conversion,
    :class:`~relay_ros.pipeline.camera_frames.CameraFrames`). A message seen in the
    previous frame is not converted again."""

    def __init__(
        self,
        cameras: Sequence[CameraEntry],
        image_size: tuple[int, int],
        *,
        encoding: str = "raw",
        jpeg_quality: int = DEFAULT_JPEG_QUALITY,
        deserialize: Callable[[bytes], Any] | None = None,
    ) -> None:
        self._frames = CameraFrames(
            cameras, encoding=encoding, jpeg_quality=jpeg_quality, deserialize=deserialize
        )
        self._size = (int(image_size[0]), int(image_size[1]))
        self._stored: dict[str, tuple[float, int]] = {}

    def convert(self, sample: FrameSample) -> dict[str, np.ndarray]:
        """Camera key -> (height, width, 3) uint8 RGB of ``sample``'s messages.

        Raises:
            FrameConversionError: a message does not convert (names camera and topic).
        """
        for key, msg in sample.images.items():
            mark = (sample.image_times[key], id(msg))
            if self._stored.get(key) != mark:
                self._frames.store(key, msg, sample.image_times[key])
                self._stored[key] = mark
        wire = self._frames.assemble(self._size)
        out: dict[str, np.ndarray] = {}
        for key, frame in wire.frames.items():
            out[key] = decode_jpeg(frame) if isinstance(frame, bytes) else frame
        return out


@dataclass(frozen=True)
class RecorderStatus:
    """What the recorder is doing, for ``/diagnostics`` and service replies.

    Attributes:
        state: ``"waiting"`` (no layout yet), ``"idle"`` (between episodes),
            ``"recording"``, ``"stopped"`` (after a failure or :meth:`Recorder.close`).
        episode: The episode being recorded (its index), else None.
        episode_frames: Frames of that episode written so far.
        episodes: Episodes in the dataset.
        frames_dropped: Frames dropped since start because the queue was full.
        frames_skipped: Frames not taken for want of fresh inputs (:meth:`Recorder.missed`).
        queued: Frames waiting in the queue.
        error: Why recording stopped, else None.
    """

    state: str
    episode: int | None
    episode_frames: int
    episodes: int
    frames_dropped: int
    frames_skipped: int
    queued: int
    error: str | None


@dataclass(frozen=True)
class EndedEpisode:
    """The episode :meth:`Recorder.end_episode` ended, as the caller's queue has it
    (the worker writes it later).

    Attributes:
        index: The index it is written as.
        frames: Frames handed to it (:meth:`Recorder.offer`), written or still queued.
    """

    index: int
    frames: int


@dataclass(frozen=True)
class _Frame:
    sample: FrameSample
    missed_before: int


@dataclass(frozen=True)
class _End:
    end: EpisodeEnd
    missed_before: int
    counted: bool = False  # the caller counted an episode for it (EndedEpisode)


@dataclass(frozen=True)
class _Layout:
    layout: DatasetLayout
    converter: FrameConverter
    counted: bool = False


_STOP = object()
_ABORT = object()


class Recorder:
    """The worker thread and its queue (see the module docstring).

    Args:
        dataset: The dataset to commit to (owned by the worker from now on).
        settings: Video encoder settings.
        log: Where it reports.
        queue_frames: Most frames waiting; more are dropped (``block=False``).
        block: Wait for room instead of dropping (a bag export).
        context: Where the episodes come from (:meth:`set_context` changes it for
            the next episode).
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        settings: VideoSettings,
        log: Logger,
        queue_frames: int = 30,
        block: bool = False,
        context: EpisodeContext | None = None,
    ) -> None:
        if queue_frames < 1:
            raise ValueError(f"queue_frames is {queue_frames}; expected at least 1")
        self._dataset = dataset
        self._settings = settings
        self._log = log
        self._limit = int(queue_frames)
        self._block = block
        self._context = context or EpisodeContext(source="policy_node")
        self._cond = threading.Condition()
        self._queue: deque[Any] = deque()
        self._frames_queued = 0
        self._pending_missed = 0  # dropped or skipped since the last queued item
        # The caller's view of the episode its queue holds, exact whatever the worker
        # is doing (a frame it popped but has not begun an episode with, an end not
        # yet written): frames offered since the last end, and their episode's index.
        self._open_frames = 0
        self._open_index = dataset.episodes
        self._caller_layout = False  # frames before set_layout are not kept
        self._dropped = 0
        self._skipped = 0
        self._error: str | None = None
        self._closing = False
        # Owned by the worker; read under the condition for status().
        self._layout: DatasetLayout | None = dataset.layout
        self._converter: FrameConverter | None = None
        self._buffer: EpisodeBuffer | None = None
        self._episode_missed = 0
        self._episodes = dataset.episodes
        self._last_drop_log = -float("inf")
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="relay_ros recorder", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ caller side
    def set_context(self, context: EpisodeContext) -> None:
        """Where the next episodes come from (the node's configuration changed)."""
        self._context = context

    def set_layout(self, layout: DatasetLayout, converter: FrameConverter) -> None:
        """Record frames of ``layout`` (converted by ``converter``) from the next frame on;
        the worker creates or checks the dataset with it (ending the episode in
        progress)."""
        with self._cond:
            counted = self._close_open_episode() is not None
            self._caller_layout = True
            self._queue.append(_Layout(layout, converter, counted))
            self._cond.notify_all()

    def offer(self, sample: FrameSample) -> bool:
        """Queue one frame; False when it was dropped (queue full, or stopped)."""
        with self._cond:
            if self._error is not None or self._closing:
                return False
            if self._frames_queued >= self._limit:
                if not self._block:
                    self._dropped += 1
                    self._pending_missed += 1
                    return False
                while self._frames_queued >= self._limit and self._error is None:
                    self._cond.wait(timeout=1.0)
                    if not self._thread.is_alive():
                        return False
                if self._error is not None:
                    return False
            self._queue.append(_Frame(sample, self._pending_missed))
            self._pending_missed = 0
            self._frames_queued += 1
            if self._caller_layout:
                self._open_frames += 1
            self._cond.notify_all()
            return True

    def missed(self, count: int = 1) -> None:
        """``count`` frames of the recording rate were not taken (no fresh inputs, a
        late tick): they count in the episode's ``frames_dropped``."""
        with self._cond:
            self._skipped += count
            self._pending_missed += count

    def end_episode(self, reason: str, success: bool | None = None) -> EndedEpisode | None:
        """End the episode in progress (if any) with ``reason`` and the operator's mark;
        the next frame starts a new one. Returns the episode it ends (None: no frame
        was offered since the last end), decided with the queue, not with what the
        worker has written yet."""
        with self._cond:
            missed, self._pending_missed = self._pending_missed, 0
            ended = self._close_open_episode()
            self._queue.append(_End(EpisodeEnd(reason, success), missed, ended is not None))
            self._cond.notify_all()
        return ended

    def _close_open_episode(self) -> EndedEpisode | None:
        """The caller's open episode ends (an end or a layout change is queued); under
        the condition."""
        if self._open_frames == 0:
            return None
        ended = EndedEpisode(self._open_index, self._open_frames)
        self._open_index += 1
        self._open_frames = 0
        return ended

    def status(self) -> RecorderStatus:
        """A consistent snapshot of what the recorder is doing."""
        with self._cond:
            if self._error is not None or (self._closing and not self._thread.is_alive()):
                state = "stopped"
            elif self._layout is None:
                state = "waiting"
            elif self._buffer is not None:
                state = "recording"
            else:
                state = "idle"
            buffer = self._buffer
            return RecorderStatus(
                state=state,
                episode=None if buffer is None else buffer.index,
                episode_frames=0 if buffer is None else buffer.length,
                episodes=self._episodes,
                frames_dropped=self._dropped,
                frames_skipped=self._skipped,
                queued=self._frames_queued,
                error=self._error,
            )

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until everything queued so far is done (True), at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return not self._queue and not self._busy
                self._cond.wait(timeout=min(remaining, 0.1))
            return True

    def close(self, reason: str = "shutdown", timeout_s: float = 30.0) -> bool:
        """End the episode in progress (``reason``), finish the queue and stop the
        worker; True when it stopped within ``timeout_s``."""
        if self._thread.is_alive():
            self.end_episode(reason)
            with self._cond:
                self._closing = True
                self._queue.append(_STOP)
                self._cond.notify_all()
            self._thread.join(timeout=timeout_s)
        if self._thread.is_alive():
            self._log.error(
                f"recorder did not finish within {timeout_s:g} s; the episode in progress "
                "is discarded at the next start"
            )
            return False
        return True

    def abort(self, timeout_s: float = 10.0) -> None:
        """Stop at once: the episode in progress is discarded (its staged files
        deleted), the queue dropped; committed episodes stay."""
        with self._cond:
            self._closing = True
            self._queue.clear()
            self._frames_queued = 0
            self._queue.append(_ABORT)
            self._cond.notify_all()
        self._thread.join(timeout=timeout_s)

    # ------------------------------------------------------------------ worker
    def _run(self) -> None:
        background_priority()
        while True:
            with self._cond:
                while not self._queue:
                    self._busy = False
                    self._cond.notify_all()
                    self._cond.wait()
                item = self._queue.popleft()
                self._busy = True
                if isinstance(item, _Frame):
                    self._frames_queued -= 1
                    self._cond.notify_all()
            if item is _STOP or item is _ABORT:
                if item is _ABORT and self._buffer is not None:
                    self._dataset.discard(self._buffer)
                    with self._cond:
                        self._buffer = None
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
                return
            if self._error is not None:
                continue  # stopped: the queue is drained without work
            try:
                self._handle(item)
            except Exception as exc:  # noqa: BLE001 - recording must never take the node down
                if is_disk_full(exc):
                    assert isinstance(exc, OSError)
                    where = exc.filename or self._dataset.root
                    self._fail(
                        f"recording stopped: the disk is full at '{where}' ({exc.strerror}); "
                        "commanding continues; free space and restart the node to record again"
                    )
                else:
                    self._fail(f"recording stopped: {type(exc).__name__}: {exc}")

    def _handle(self, item: Any) -> None:
        if isinstance(item, (_Layout, _End)) and item.counted and self._buffer is None:
            # The caller counted an episode none of whose frames could be recorded
            # (each failed conversion): the indices after it are one lower.
            with self._cond:
                self._open_index -= 1
        if isinstance(item, _Layout):
            self._finish_episode(EpisodeEnd("layout changed"))
            self._dataset.use_layout(item.layout)
            with self._cond:
                self._layout = item.layout
            self._converter = item.converter
        elif isinstance(item, _End):
            if self._buffer is not None and item.missed_before:
                self._episode_missed += item.missed_before
                self._report_missed()
            self._finish_episode(item.end)
        else:
            self._record(item)

    def _record(self, item: _Frame) -> None:
        if self._layout is None or self._converter is None:
            return  # frames before the first layout: nothing to store them in
        if item.missed_before and self._buffer is not None:
            self._report_missed()
        try:
            images = self._converter.convert(item.sample)
        except FrameConversionError as exc:
            with self._cond:
                self._skipped += 1
                self._pending_missed += 1
            self._log.warning(f"recording: frame not recorded: {exc}")
            return
        sample = item.sample
        frame = RecordedFrame(
            time=sample.time,
            images=images,
            state=sample.state,
            action=sample.action,
            intervention=sample.intervention,
            task=sample.task,
        )
        if self._buffer is None:
            # thread_priority may have raised every thread of the node since: the
            # encoders started now inherit this thread's priority.
            background_priority()
            buffer = self._dataset.begin(self._settings, self._context)
            with self._cond:
                self._buffer = buffer
            self._episode_missed = 0
            self._log.info(f"recording episode {buffer.index} into '{self._dataset.root}'")
        else:
            self._episode_missed += item.missed_before
        self._buffer.add(frame)

    def _finish_episode(self, end: EpisodeEnd) -> None:
        buffer = self._buffer
        if buffer is None:
            return
        end = EpisodeEnd(end.reason, end.success, self._episode_missed)
        try:
            committed = self._dataset.commit(buffer, end)
        except BaseException:
            self._dataset.discard(buffer)
            with self._cond:
                self._buffer = None
            raise
        with self._cond:
            self._buffer = None
            self._episodes = self._dataset.episodes
        mark = {None: "not marked", True: "success", False: "failure"}[end.success]
        dropped = f", {end.frames_dropped} frame(s) missing" if end.frames_dropped else ""
        self._log.info(
            f"episode {committed.index} written: {committed.length} frames, ended by "
            f"{end.reason}, {mark}{dropped}"
        )

    def _report_missed(self) -> None:
        now = time.monotonic()
        if now - self._last_drop_log < _DROP_LOG_PERIOD_S:
            return
        with self._cond:
            dropped, skipped = self._dropped, self._skipped
        self._log.warning(
            f"recording misses frames: {dropped} dropped (the encoder is slower than the "
            f"recording rate), {skipped} skipped (inputs missing or stale) since start"
        )
        self._last_drop_log = now

    def _fail(self, message: str) -> None:
        buffer = self._buffer
        if buffer is not None:
            self._dataset.discard(buffer)
        with self._cond:
            self._buffer = None
            self._error = message
            self._cond.notify_all()
        self._log.error(message)
