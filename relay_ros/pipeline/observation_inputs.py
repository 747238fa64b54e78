"""The inputs of an observation: camera frames and joint states, read, kept and checked.

:class:`ObservationInputs` is the streaming core's input side, without rclpy:

- **frames**: each camera's newest message
  (:class:`~relay_ros.pipeline.camera_frames.CameraFrames`), pulled from the
  cameras' frame sources (:mod:`~relay_ros.pipeline.frame_source`) when the core
  asks (:meth:`ObservationInputs.read_sources`) or pushed with
  :meth:`ObservationInputs.store_frame`; a frame is converted on arrival when the
  next request is due before that camera's next frame, else when an observation
  needs it;
- **joint states** (:class:`~relay_ros.pipeline.state.JointStateCache`), in the
  configured order, refused when a joint is missing, stale or not finite; a sample
  that would mean moving far faster than the joint's velocity limit is rejected
  (counted as a refusal, WARN at most every 5 s) and the joint is not trusted for a
  moment after it (:mod:`~relay_ros.pipeline.state`);
- :meth:`ObservationInputs.snapshot`: everything one observation takes (the wire
  frames, the state vector, the observation time), or the :class:`InputProblem`
  that stops it (a camera without a frame, a stale input, bad joint states, a frame
  that does not convert).

**Which moment an observation shows** (:data:`OBSERVATION_TIMINGS`): a frame is up
to a camera period old when a request goes out (67 ms at 15 Hz), and the arm moves
meanwhile, so the newest joint state does not show the arm the frames show.

- ``"frame_arrival"`` (the default): the streaming core sends the request as soon as
  every camera has a new frame in the camera period before the request is due (at
  the latest when it is due), with the newest state: frames and state both fresh;
- ``"frame"``: the observation is taken at its newest frame's arrival: the state is
  the joint states' history interpolated at that time
  (:meth:`~relay_ros.pipeline.state.JointStateCache.vector_at`) and ``t_obs`` is that
  time, so the chunk's action ``i`` is meant for ``t_obs + i*dt`` from then (the
  request still goes when due; the request lead counts from the request);
- ``"request"``: the newest state and the newest frames at the request, each as old
  as it is (kept so that the benchmarks can compare the three).

Times are reception times on the node clock for both frames and joint states (the
middleware's reception stamp, ``node.polled``), not header stamps: those come from
the camera driver's and the controller's clocks, which need not agree with each
other or with the node's, and some drivers leave them zero.

Time is passed in (node clock); the frame work is timed on the :class:`RequestClock`'s
``perf_clock``. Not thread-safe: call it from the node's executor thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from relay_ros.pipeline.camera_frames import CameraFrames, FrameConversionError, WireFrames
from relay_ros.pipeline.camera_map import CameraEntry
from relay_ros.pipeline.frame_source import FrameSource
from relay_ros.pipeline.image_encoding import DEFAULT_JPEG_QUALITY
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.request_clock import RequestClock
from relay_ros.pipeline.safety import check_fresh
from relay_ros.pipeline.settings import StreamingSettings
from relay_ros.pipeline.state import JointStateCache, JointStateError

__all__ = [
    "DEFAULT_OBSERVATION_TIMING",
    "OBSERVATION_TIMINGS",
    "InputProblem",
    "ObservationInputs",
    "ObservationTiming",
    "Snapshot",
]

ObservationTiming = Literal["frame", "frame_arrival", "request"]
#: Which moment an observation shows (module docstring).
OBSERVATION_TIMINGS: tuple[str, ...] = ("frame", "frame_arrival", "request")
DEFAULT_OBSERVATION_TIMING: ObservationTiming = "frame_arrival"

ProblemKind = Literal[
    "missing_input", "stale_input", "joint_states", "frame_conversion", "frame_refused"
]


#: How long after a clock jump joint states stamped before it are dropped, seconds.
JUMP_QUARANTINE_S = 1.0


@dataclass(frozen=True)
class InputProblem:
    """Why no observation can be taken now.

    Attributes:
        kind: ``"missing_input"`` (a camera without a frame yet), ``"stale_input"``
            (a frame older than ``sensor_timeout_s``), ``"joint_states"`` (a joint
            missing, stale or not finite), ``"frame_conversion"`` (the newest frame
            of a camera does not convert: that camera falls back to its previous
            frame, the next tick tries again) or ``"frame_refused"`` (a camera has no
            usable frame, missing or stale, because its newer ones were refused: the
            reason is the refusal, naming the camera, its topic and why).
        reason: The sentence for the log and ``/diagnostics``.
    """

    kind: ProblemKind
    reason: str


@dataclass(frozen=True, eq=False)
class Snapshot:
    """The inputs of one observation.

    Attributes:
        frames: The wire frames (converted, maybe JPEG) and their timing.
        state: The state vector over the watched joints (state joints first).
        t_obs: The observation's time, node clock (s): action ``i`` of its chunk is
            meant for ``t_obs + i*dt``.
    """

    frames: WireFrames
    state: np.ndarray
    t_obs: float


class ObservationInputs:
    """Frames and joint states for observations (see the module docstring).

    Args:
        cameras: The camera map's entries (key, topic, transport), in map order.
        joints: The joints whose states are kept (state joints, then commanded ones).
        clock: Where frame processing times go; its ``perf_clock`` times the reads.
        sources: Camera key -> where to read its frames on demand; None: frames are
            pushed with :meth:`store_frame`.
        encoding: ``"raw"`` or ``"jpeg"`` frames on the wire.
        jpeg_quality: JPEG quality for ``"jpeg"``.
        deserialize: For :class:`CameraFrames`: turns a serialized ``sensor_msgs/Image``
            its CDR reader does not understand into a message.
        refused: Called with a sentence and ``now`` when a frame or joint state
            message is refused (the core counts and logs it).
        joint_states_topic: The joint states' resolved topic, named in every reason
            about them (None: "joint states" alone).
    """

    def __init__(
        self,
        cameras: Sequence[CameraEntry],
        joints: Sequence[str],
        *,
        clock: RequestClock,
        sources: Mapping[str, FrameSource] | None = None,
        encoding: str = "raw",
        jpeg_quality: int = DEFAULT_JPEG_QUALITY,
        deserialize: Callable[[bytes], Any] | None = None,
        refused: Callable[[str, float], None],
        joint_states_topic: str | None = None,
    ) -> None:
        keys = [c.key for c in cameras]
        if sources is not None and set(sources) != set(keys):
            raise ValueError(
                f"frame sources {sorted(sources)} do not match the camera map's keys {keys}"
            )
        self.frames = CameraFrames(
            cameras, encoding=encoding, jpeg_quality=jpeg_quality, deserialize=deserialize
        )
        self.joints = JointStateCache(joints)
        # After a clock jump: (old time, new time, until when) to tell messages
        # published before it (see clear()).
        self._jump: tuple[float, float, float] | None = None
        self._sources = dict(sources) if sources is not None else None
        self._clock = clock
        self._refused = refused
        self._limits: Mapping[str, JointLimit] | None = None
        self._joint_label = (
            "joint states"
            if joint_states_topic is None
            else f"joint states on {joint_states_topic}"
        )
        self.frames_received = 0

    @classmethod
    def for_settings(
        cls,
        settings: StreamingSettings,
        camera_keys: Sequence[str],
        cameras: Sequence[CameraEntry] | None,
        *,
        clock: RequestClock,
        sources: Mapping[str, FrameSource] | None,
        deserialize: Callable[[bytes], Any] | None,
        refused: Callable[[str, float], None],
        joint_states_topic: str | None = None,
    ) -> ObservationInputs:
        """The inputs ``settings`` need: the camera map's entries (None: raw frames
        under ``camera_keys``), the state joints then the other commanded joints, and
        the wire encoding; ``joint_states_topic`` as for the constructor."""
        entries = (
            list(cameras)
            if cameras is not None
            else [CameraEntry(key, key, "raw", "reliable") for key in camera_keys]
        )
        joints = dict.fromkeys(list(settings.state_joints) + list(settings.commanded_joints))
        return cls(
            entries,
            list(joints),
            clock=clock,
            sources=sources,
            encoding=settings.image_encoding,
            jpeg_quality=settings.jpeg_quality,
            deserialize=deserialize,
            refused=refused,
            joint_states_topic=joint_states_topic,
        )

    @property
    def pulls_frames(self) -> bool:
        """Frames come from sources read on demand (:meth:`read_sources`)."""
        return self._sources is not None

    # ------------------------------------------------------------------ frames
    def read_sources(
        self, now: float, request_at: float | None, image_size: tuple[int, int]
    ) -> None:
        """Take each camera's newest frame from its source, if one came, timing each
        read; ``request_at`` and ``image_size`` as for :meth:`store_frame`."""
        if self._sources is None:
            return
        perf = self._clock.perf_clock
        for key, source in self._sources.items():
            started = perf()
            frame = source.take_newest(now)
            if frame is not None:
                read_s = perf() - started
                self.store_frame(
                    key, frame.msg, frame.received, request_at, image_size, read_s=read_s
                )

    def store_frame(
        self,
        key: str,
        msg: Any,
        received: float,
        request_at: float | None,
        image_size: tuple[int, int] | None,
        *,
        read_s: float = 0.0,
    ) -> None:
        """Keep ``msg`` as camera ``key``'s newest frame (received at ``received``;
        reading it took ``read_s``). It is converted now when the next request (at
        ``request_at``) is due before that camera's next frame and the server's
        ``image_size`` is known; a frame that does not convert is refused (the
        camera's previous frame stays until it is stale)."""
        self.frames_received += 1
        self.frames.store(key, msg, received, read_s=read_s)
        if image_size is None or not self.frames.due_soon(key, received, request_at):
            return
        try:
            spent = self.frames.prepare(key, image_size)
        except FrameConversionError as exc:
            self._refused(str(exc), received)
            return
        if spent:
            self._clock.frames_processed(spent)

    # ------------------------------------------------------------------ joint states
    def joint_state(
        self,
        names: Sequence[str],
        positions: Sequence[float],
        now: float,
        measured_at: float | None = None,
        *,
        limits: Mapping[str, JointLimit] | None = None,
    ) -> None:
        """Positions from one ``JointState`` message received at ``now`` (its header
        stamp ``measured_at``, if any); a malformed message is refused like a bad frame.

        ``limits``: the joint limits in force (joint -> ``JointLimit``): a sample
        implying far more than a joint's ``max_velocity`` is rejected and refused (a
        joint without position limits may wrap by a turn)."""
        if limits is not self._limits:
            self._limits = limits
            self.joints.set_velocity_limits(*_velocity_limits(limits or {}))
        jump = self._jump
        if jump is not None and measured_at:
            old, new, until = jump
            if now >= until:
                self._jump = None
            elif abs(measured_at - old) < abs(measured_at - new):
                return  # published before the clock jump (see clear())
        rejected = self.joints.rejected_samples
        try:
            self.joints.update(list(names), list(positions), now, measured_at=measured_at)
        except JointStateError as exc:
            self._refused(f"{self._joint_label}: {exc}", now)
        if self.joints.rejected_samples != rejected:
            self._refused(f"{self._joint_label}: {self.joints.last_rejection}", now)

    def measured(self, now: float, timeout_s: float, names: Sequence[str]) -> np.ndarray | None:
        """The measured positions of ``names`` at ``now``, or None when any is missing,
        stale or not finite."""
        try:
            vector = self.joints.vector(now, timeout_s)
        except JointStateError:
            return None
        order = {name: i for i, name in enumerate(self.joints.joint_names)}
        return np.array([vector[order[j]] for j in names])

    def measured_at(self, names: Sequence[str]) -> float:
        """When the positions :meth:`measured` gives for ``names`` were measured."""
        return self.joints.measured_at(names)

    # ------------------------------------------------------------------ observations
    def snapshot(
        self,
        now: float,
        image_size: tuple[int, int],
        timeout_s: float,
        *,
        timed_after: int | None = None,
        at_frames: bool = False,
    ) -> Snapshot | InputProblem:
        """The inputs of an observation taken at ``now``, or why there is none.

        ``timed_after``: a value of ``frames.stored`` from when the request's timing
        began (frames stored after it are inside that timing already).
        ``at_frames``: the observation is taken at its newest frame's arrival (the
        ``"frame"`` timing): the state then, interpolated, and that ``t_obs``.
        """
        missing = self.frames.missing()
        if missing:
            reasons = "; ".join(self.frames.why_missing(key) for key in missing)
            refused = self._refusal(missing) is not None
            return InputProblem("frame_refused" if refused else "missing_input", reasons)
        arrived = self.frames.stamps()
        stamps = {self.frames.describe_camera(key): t for key, t in arrived.items()}
        stale = check_fresh(stamps, now, timeout_s)
        if stale is not None:
            refusal = self._refusal([k for k, t in arrived.items() if now - t > timeout_s])
            if refusal is not None:
                return InputProblem(
                    "frame_refused",
                    f"stale observation: {stale.reason}; its newer frames were refused: {refusal}",
                )
            return InputProblem("stale_input", f"stale observation: {stale.reason}")
        t_obs = min(now, max(self.frames.stamps().values())) if at_frames else now
        try:
            if at_frames:
                state = self.joints.vector_at(t_obs, now, timeout_s)
            else:
                state = self.joints.vector(now, timeout_s)
        except JointStateError as exc:
            return InputProblem("joint_states", f"{self._joint_label}: {exc}")
        try:
            wire = self.frames.assemble(image_size, timed_after=timed_after)
        except FrameConversionError as exc:
            return InputProblem("frame_conversion", str(exc))
        if wire.converted:
            self._clock.frames_processed(wire.conversion_s + wire.read_s, wire.converted)
        return Snapshot(wire, state, t_obs)

    def _refusal(self, keys: Sequence[str]) -> str | None:
        """The refusal of the first of ``keys`` whose newest frame was refused, if any."""
        return next((r for key in keys if (r := self.frames.refusal(key)) is not None), None)

    def refreshed_since(self, since: float) -> bool:
        """Whether every camera has a frame that arrived at or after ``since``."""
        if self.frames.missing():
            return False
        return all(t >= since for t in self.frames.stamps().values())

    def frame_period(self) -> float | None:
        """The longest of the cameras' frame periods (s), None until every one is known."""
        if self.frames.missing():
            return None
        periods = [self.frames.period(key) for key in self.frames.stamps()]
        known = [p for p in periods if p is not None]
        return max(known) if len(known) == len(periods) else None

    def clear_frames(self) -> None:
        """Forget every frame (after a reconnect: the image size may change)."""
        self.frames.clear()

    def clear(self, jump: tuple[float, float] | None = None) -> None:
        """Forget every frame and joint state (the clock jumped: their times are on the
        old timeline, and a joint state from before a jump back would stay the newest).

        ``jump``: ``(old_time, new_time)`` of the jump. Joint states published before it
        can still be queued or in flight, and their reception times look fresh on the
        new clock; for :data:`JUMP_QUARANTINE_S` after it a joint state whose header
        stamp is nearer the old time than the new one is dropped (a simulator that
        skipped ahead has moved the arm since)."""
        self.frames.clear()
        self.joints.reset()
        if jump is not None:
            old, new = jump
            self._jump = (old, new, new + JUMP_QUARANTINE_S)


def _velocity_limits(limits: Mapping[str, JointLimit]) -> tuple[dict[str, float], list[str]]:
    """(joint -> max_velocity, the joints without position limits) of ``limits``."""
    velocities: dict[str, float] = {}
    continuous: list[str] = []
    for joint, limit in limits.items():
        velocities[joint] = float(limit.max_velocity)
        if math.isinf(limit.min_position) and math.isinf(limit.max_position):
            continuous.append(joint)
    return velocities, continuous
