"""The streaming core of policy_node: inputs in, safe trajectories out (no rclpy).

:class:`StreamingCore` holds everything policy_node decides, with time passed in,
so it is tested on a synthetic clock:

- the cached inputs: the newest message per camera
  (:class:`~relay_ros.pipeline.camera_frames.CameraFrames`, converted only when an
  observation needs it, or as it arrives when a request is due before that
  camera's next frame) and the joint states
  (:class:`~relay_ros.pipeline.state.JointStateCache`), with arrival times;
- the server it is connected to (:class:`~relay_ros.pipeline.server_spec.ServerSpec`,
  rebuilt on every connect) and the :class:`~relay_ros.pipeline.scheduler.ChunkScheduler`
  for it;
- each request: a fresh, complete observation or none (hold and say why), tagged
  with a :class:`RequestTag` so that a reply from before a reconnect or an episode
  reset is never executed;
- each reply: error replies, malformed replies, NaN/Inf, joint limits and the
  first-step jump are refused; a refusal holds position and backs off
  ``retry_delay_s`` before the next request;
- holding: the current commanded position is sent once per hold, the reason is
  logged when its kind changes and always shown in :meth:`health`;
- the bookkeeping, each with one owner: counters and the reply latencies here
  (kept across reconnects; the scheduler reads the latencies for its automatic
  lead), the retry deadline and stall time in the scheduler (the stall of
  replaced schedulers is carried over).

The node feeds it messages and timer ticks and turns its :class:`TrajectoryMessage`
outputs into ``JointTrajectory`` messages; :mod:`relay_ros.pipeline.health` reads it
for ``/diagnostics``. Not thread-safe: call it from one thread (the node's executor);
replies cross from the connection's worker thread through the node's queue.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import numpy as np

from relay_ros.pipeline.action_prefix import committed_prefix, to_action_space
from relay_ros.pipeline.camera_frames import (
    FRAME_LOOKAHEAD_S,
    LAST_READ_LEAD_S,
    CameraFrames,
    FrameConversionError,
)
from relay_ros.pipeline.camera_map import CameraEntry
from relay_ros.pipeline.observation import ObservationBuilder, ObservationError, reply_to_chunk
from relay_ros.pipeline.outputs import OutputController, OutputsError, load_outputs
from relay_ros.pipeline.safety import (
    JointLimits,
    LimitsMode,
    Refusal,
    check_chunk,
    check_first_step,
    check_fresh,
)
from relay_ros.pipeline.scheduler import (
    ChunkScheduler,
    Publication,
)
from relay_ros.pipeline.server_spec import ServerSpec, ServerSpecError
from relay_ros.pipeline.settings import (
    FIXED_SETTINGS,
    StreamingConfigError,
    StreamingSettings,
    check_live_settings,
    scheduler_config,
)
from relay_ros.pipeline.state import JointStateCache, JointStateError
from relay_ros.pipeline.stats import LatencyStats, MessageCounter
from relay_ros.pipeline.trajectory import TrajectoryPoints, build_points, format_t_obs
from relay_ros.wire.logsafe import shorten
from relay_ros.wire.request_timing import RequestTiming

__all__ = ["RequestTag", "StreamingCore", "TrajectoryMessage"]

#: time_from_start of the single point of a hold trajectory, at least one control period.
HOLD_TIME_S = 0.1
#: Request timeout while no latency has been measured yet (s): a server's first
#: inference after it started may take much longer than the following ones.
FIRST_REQUEST_TIMEOUT_S = 30.0
#: Shortest automatic request timeout (s), and the factor on the p99 latency.
MIN_REQUEST_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_P99_FACTOR = 10.0
#: A refused camera frame or joint state message is logged at most this often (each
#: refusal is counted).
_INPUT_WARNING_PERIOD_S = 5.0


class Logger(Protocol):
    """What the core logs through: rclpy's node logger or a ``logging.Logger``."""

    def info(self, message: str) -> Any: ...
    def warning(self, message: str) -> Any: ...
    def error(self, message: str) -> Any: ...


@dataclass(frozen=True)
class RequestTag:
    """Travels with each observation through the connection and back with its reply.

    Attributes:
        generation: Which connection the request was made on; a reply from an
            earlier one is dropped (its scheduler is gone).
        session_id: The episode; a reply from before ``~/reset`` is never executed.
        t_obs: Observation time on the node clock (s).
        started: ``perf_clock()`` when the request's tick began reading frames (or
            when the request was decided, on a tick that read none): the start of
            ``request_to_wire``.
        frame_processing_s: Processing time (read and conversion) of the newest
            frame when it was done before the request's tick (converted on arrival);
            0 when the request's tick read or converted it, which ``started``
            already covers.
    """

    generation: int
    session_id: str
    t_obs: float
    started: float
    frame_processing_s: float


@dataclass(frozen=True, eq=False)
class TrajectoryMessage:
    """One ``JointTrajectory`` to publish.

    Attributes:
        output: The output controller's name, or None for ``~/preview``.
        frame_id: ``t_obs=<seconds>`` for a chunk, empty for a hold.
        joint_names: The controller's joints, in point order.
        points: Positions, velocities, ``time_from_start`` and the stamp.
    """

    output: str | None
    frame_id: str
    joint_names: tuple[str, ...]
    points: TrajectoryPoints


@dataclass
class _Active:
    """Everything that depends on the server; rebuilt on every (re)connect."""

    spec: ServerSpec
    scheduler: ChunkScheduler
    builder: ObservationBuilder
    outputs: list[OutputController]
    used_dims: np.ndarray
    generation: int


@dataclass
class _Counts:
    requests: int = 0
    chunks_received: int = 0
    chunks_published: int = 0
    error_replies: int = 0
    refusals: int = 0
    connection_errors: int = 0
    frames_received: int = 0


@dataclass
class _Timing:
    frame_processing: LatencyStats = field(default_factory=LatencyStats)
    request_to_wire: LatencyStats = field(default_factory=LatencyStats)
    image_to_wire: LatencyStats = field(default_factory=LatencyStats)


@dataclass
class _Network:
    """The latency split of each request (``wire.request_timing``), seconds, and its size."""

    upload: LatencyStats = field(default_factory=LatencyStats)
    server: LatencyStats = field(default_factory=LatencyStats)
    download: LatencyStats = field(default_factory=LatencyStats)
    total: LatencyStats = field(default_factory=LatencyStats)
    request_bytes: LatencyStats = field(default_factory=LatencyStats)


class StreamingCore:
    """Decides when to request, what to publish and when to hold (see module docs).

    Args:
        config: The settings (a :class:`relay_ros.node.params.NodeConfig`).
        camera_keys: The camera map's keys, in map order.
        submit: Hands an observation and its tag to the connection; False when it
            cannot take it now (not connected, a request in flight).
        publish: Sends one trajectory (to its controller or ``~/preview``).
        request_reset: Asks the connection to send the server a reset.
        log: Where sentences go (the node's logger).
        perf_clock: Monotonic clock for the pipeline timing (seconds).
        cameras: The camera map's entries (topic and transport of each key); None:
            the keys only, for frames given as RGB arrays.
        deserialize: For :class:`CameraFrames`: turns a serialized ``sensor_msgs/Image``
            its CDR reader does not understand into a message (rclpy's).
        read_frames: For a node that reads its cameras on demand: called by
            :meth:`tick` with ``now`` while :meth:`wants_frames`, after a due chunk
            is published, to hand each camera's newest message to
            :meth:`frame_arrived`.
            On a tick that makes a request its time counts in ``request_to_wire``.
            None: frames are pushed with :meth:`frame_arrived` as they arrive.
    """

    def __init__(
        self,
        config: StreamingSettings,
        *,
        camera_keys: Sequence[str],
        submit: Callable[[dict[str, Any], RequestTag], bool],
        publish: Callable[[TrajectoryMessage], None],
        request_reset: Callable[[], None],
        log: Logger,
        perf_clock: Callable[[], float] = time.perf_counter,
        cameras: Sequence[CameraEntry] | None = None,
        deserialize: Callable[[bytes], Any] | None = None,
        read_frames: Callable[[float], None] | None = None,
    ) -> None:
        check_live_settings(config)
        self._read_frames = read_frames
        self._cfg = config
        self._camera_keys = tuple(camera_keys)
        self._submit = submit
        self._publish_message = publish
        self._request_reset = request_reset
        self._log = log
        self._perf_clock = perf_clock
        watched = list(dict.fromkeys(list(config.state_joints) + list(config.commanded_joints)))
        self._joints = JointStateCache(watched)
        entries = (
            list(cameras)
            if cameras is not None
            else [CameraEntry(key, key, "raw", "reliable") for key in self._camera_keys]
        )
        self._frames = CameraFrames(
            entries,
            encoding=config.image_encoding,
            jpeg_quality=config.jpeg_quality,
            deserialize=deserialize,
        )
        self._prompt = config.prompt
        self._session_id = uuid.uuid4().hex
        self._enabled = config.autostart
        self._active: _Active | None = None
        self._generation = 0
        self._config_error: str | None = None
        self._hold_reason: str | None = None
        self._hold_kind: str | None = None
        self._published_since_hold = False
        self._last_refusal: str | None = None
        self._error_messages = MessageCounter()  # bounded: each distinct error logged once
        self._input_warned_at = -math.inf
        self._counts = _Counts()
        self._latency = LatencyStats()
        self._timing = _Timing()
        self._network = _Network()
        self._sent_at: float | None = None  # node clock, while a request is in flight
        self._stall_before_s = 0.0  # stall time of schedulers replaced by a reconnect
        self._dropped_before = 0

    # ------------------------------------------------------------------ state
    @property
    def config(self) -> StreamingSettings:
        """The settings in force."""
        return self._cfg

    @property
    def session_id(self) -> str:
        """The session id sent with observations; :meth:`reset_episode` starts a new one."""
        return self._session_id

    @property
    def enabled(self) -> bool:
        """Whether the core commands the robot (``autostart`` / ``~/enable``)."""
        return self._enabled

    @property
    def prompt(self) -> str:
        """The task instruction sent with the next observation."""
        return self._prompt

    @property
    def server(self) -> ServerSpec | None:
        """The server connected to, None before the first connect or after a
        disconnect or a configuration that does not fit it."""
        return None if self._active is None else self._active.spec

    @property
    def image_size(self) -> tuple[int, int] | None:
        """(height, width) frames are resized to; None until a server is known
        (frames before that are useless)."""
        return None if self._active is None else self._active.spec.image_size

    @property
    def counts(self) -> dict[str, int]:
        """Requests, chunks received/published/dropped late, error replies,
        refusals and connection errors so far."""
        dropped = self._dropped_before
        if self._active is not None:
            dropped += self._active.scheduler.chunks_dropped_late
        counts = vars(self._counts).copy()
        counts["chunks_dropped_late"] = dropped
        return counts

    @property
    def last_refusal(self) -> str | None:
        """Why the last refused chunk, observation (stale inputs), frame or joint
        state message was refused, in a sentence; it changes exactly when
        ``counts["refusals"]`` grows."""
        return self._last_refusal

    @property
    def hold_reason(self) -> str | None:
        """Why the robot is held now, or None while streaming."""
        return self._hold_reason

    @property
    def latency(self) -> LatencyStats:
        """Observation -> reply latencies on the node clock, every action reply
        (refused ones too), kept across reconnects."""
        return self._latency

    @property
    def pipeline_timing(self) -> dict[str, LatencyStats]:
        """Seconds spent per frame (``frame_processing``, its read included), from the
        request's tick to the observation on the wire (``request_to_wire``, the reads
        of that tick included), and for the newest frame of each request its
        processing on an earlier tick plus ``request_to_wire`` (``image_to_wire``)."""
        return dict(vars(self._timing))

    @property
    def network_timing(self) -> dict[str, LatencyStats]:
        """Per request: ``upload``, ``server``, ``download`` and ``total`` seconds
        (:class:`~relay_ros.wire.request_timing.RequestTiming`) and ``request_bytes``."""
        return dict(vars(self._network))

    @property
    def frames(self) -> CameraFrames:
        """The newest message of each camera (and how frames are encoded)."""
        return self._frames

    def request_timeout(self) -> float:
        """Seconds one request may take before the connection drops it and reconnects.

        ``request_timeout_s`` when set; automatic (None): ``max(2 s, 10 x p99)`` of
        the measured latency, and 30 s before the first reply (a server's first
        inference may be slow). Safe to call from the connection's worker thread.
        """
        fixed = self._cfg.request_timeout_s
        if fixed is not None:
            return fixed
        p99 = self._latency.percentile(99)
        if p99 is None:
            return FIRST_REQUEST_TIMEOUT_S
        return max(MIN_REQUEST_TIMEOUT_S, REQUEST_TIMEOUT_P99_FACTOR * p99)

    def stall_time(self, now: float) -> float:
        """Seconds the controllers had no future point to follow while streaming."""
        total = self._stall_before_s
        if self._active is not None:
            total += self._active.scheduler.stall_time(now)
        return total

    # ------------------------------------------------------------------ inputs
    def wants_frames(self, now: float) -> bool:
        """Whether a node that reads its cameras on demand should hand over each
        camera's newest message now: streaming, and the next request is due within
        ``FRAME_LOOKAHEAD_S`` (so frames can be converted as they come, before it).
        """
        active = self._active
        if active is None or not self._enabled:
            return False
        due = active.scheduler.next_request_time()
        return due is not None and now >= due - FRAME_LOOKAHEAD_S

    def next_deadline(self, now: float) -> float | None:
        """When :meth:`tick` next has work, on the node clock.

        - a held chunk: its publication time;
        - else before the next request: ``FRAME_LOOKAHEAD_S`` before it (from then
          on :meth:`wants_frames` is true), then one tick period (``tick_hz``) at a
          time until the request, never past it, with one tick
          ``LAST_READ_LEAD_S`` before it (a last read, so that the request's own
          tick finds the frames that came before it converted);
        - ``None`` when only an event can bring work: a reply or a failure, a
          connection, ``set_enabled``.

        A node may tick at that time instead of on a fixed period, as long as it
        also ticks after every event.
        """
        active = self._active
        if active is None or not self._enabled:
            return None
        scheduler = active.scheduler
        held = scheduler.publication_due
        if held is not None:
            return held
        due = scheduler.next_request_time()
        if due is None:
            return None
        if now < due - FRAME_LOOKAHEAD_S:
            return due - FRAME_LOOKAHEAD_S
        period = 1.0 / self._cfg.tick_hz
        if due <= now:
            return now + period  # a request that was due but not made (a hold): retry
        last_read = due - LAST_READ_LEAD_S
        if now < last_read:
            return min(last_read, now + period)
        return min(due, now + period)

    def frame_arrived(self, key: str, msg: Any, now: float, *, read_s: float = 0.0) -> None:
        """Keep ``msg`` as camera ``key``'s newest message (a serialized or message
        ``sensor_msgs/Image``, a ``CompressedImage``, or an RGB array), received at
        ``now``; ``read_s`` is the wall time spent reading it from the middleware
        (counted in its frame processing time).

        It is converted now only when the next request is due before that camera's
        next frame; otherwise when an observation needs it. A message that does not
        convert is refused (counted, logged at most every 5 s) without holding: the
        camera's previous frame stays until it is stale.
        """
        self._counts.frames_received += 1
        self._frames.store(key, msg, now, read_s=read_s)
        active = self._active
        if active is None:
            return  # the target size comes with the metadata
        if not self._frames.due_soon(key, now, active.scheduler.next_request_time()):
            return
        try:
            spent = self._frames.prepare(key, active.spec.image_size)
        except FrameConversionError as exc:
            self._input_refused(str(exc), now)
            return
        if spent:
            self._timing.frame_processing.add(spent)

    def joint_state(self, names: Sequence[str], positions: Sequence[float], now: float) -> None:
        """Positions from one ``JointState`` message received at ``now``; a malformed
        message is refused like a bad frame."""
        try:
            self._joints.update(list(names), list(positions), now)
        except JointStateError as exc:
            self._input_refused(f"joint states: {exc}", now)

    def _input_refused(self, reason: str, now: float) -> None:
        self._counts.refusals += 1
        self._last_refusal = reason
        if now - self._input_warned_at >= _INPUT_WARNING_PERIOD_S:
            self._input_warned_at = now
            self._log.warning(reason)

    def set_prompt(self, text: str) -> None:
        """Replace the task instruction from the next observation on."""
        if text != self._prompt:
            self._log.info(f"prompt changed to {text!r}")
        self._prompt = text

    # ------------------------------------------------------------------ commands
    def reset_episode(self, now: float) -> str:
        """Start a new episode: new session id, server reset, hold until a chunk
        of the new session arrives. Returns the sentence for the service reply."""
        self._session_id = uuid.uuid4().hex
        self._request_reset()
        if self._active is not None:
            self._active.scheduler.reset()
        self._hold("episode reset: waiting for a chunk from the new session", "reset", now)
        message = f"new episode, session {self._session_id}"
        self._log.info(message)
        return message

    def set_enabled(self, enabled: bool, now: float) -> str:
        """Start or stop commanding (``~/enable``); returns what happened."""
        if enabled and not self._enabled:
            self._enabled = True
            self._hold_reason = self._hold_kind = None
            message = "enabled: commanding from the next fresh observation"
        elif not enabled and self._enabled:
            self._hold("disabled through ~/enable", "disabled", now)
            self._enabled = False
            message = "disabled: holding position"
        else:
            message = "already " + ("enabled" if self._enabled else "disabled")
        self._log.info(message)
        return message

    def apply_config(self, config: StreamingSettings, now: float) -> None:
        """Run with ``config`` from now on; takes effect before this returns.

        Live: ``prompt``, ``seed``, ``execute_horizon``, ``request_lead_s``,
        ``request_mode``, ``blend_steps``, ``retry_delay_s``, ``limits_mode``,
        ``joint_limits``, ``max_joint_step``, ``sensor_timeout_s``, ``dry_run``.
        Switching ``dry_run`` on sends the controllers a hold at the commanded
        position first, so nothing keeps moving the robot; switching it off
        starts commanding from the next chunk (first-step check included).

        Raises:
            StreamingConfigError: a setting that only a restart changes (model,
                URL, camera map, topics, joints, outputs, rates), or values the
                connected server cannot run with; nothing is changed then.
        """
        fixed = [
            name
            for name in FIXED_SETTINGS
            if getattr(config, name, None) != getattr(self._cfg, name, None)
        ]
        if fixed:
            raise StreamingConfigError(
                f"{fixed} cannot change while the node runs; restart the node with the new values"
            )
        check_live_settings(config)
        active = self._active
        sched_config = None if active is None else scheduler_config(config, active.spec)
        old = self._cfg
        if config.dry_run and not old.dry_run:
            # Still routed to the controllers: stop them where they are.
            self._hold(
                "dry_run switched on: controllers hold, chunks go to ~/preview", "config", now
            )
        self._cfg = config
        if config.prompt != old.prompt:
            self.set_prompt(config.prompt)
        if active is not None and sched_config is not None:
            active.scheduler.reconfigure(sched_config)
            if config.dry_run != old.dry_run:
                active.scheduler.reset()  # the next chunk starts from the robot, not the preview
        if not config.dry_run and old.dry_run:
            # What was published went to ~/preview: a hold must not move the robot there.
            self._published_since_hold = False
        self._log.info("configuration changed")

    # ------------------------------------------------------------------ connection events
    def connected(self, metadata: Mapping[str, Any], now: float) -> None:
        """The connection (re)connected; ``metadata`` is what the server announced."""
        cfg = self._cfg
        try:
            spec = ServerSpec.from_metadata(metadata, model=cfg.model)
            sched_config = scheduler_config(cfg, spec)
            outputs = load_outputs({o.name: o.as_mapping() for o in cfg.outputs}, spec)
            builder = ObservationBuilder(
                spec, camera_keys=self._camera_keys, state_joints=cfg.state_joints
            )
        except (ServerSpecError, StreamingConfigError, OutputsError, ObservationError) as exc:
            self._config_error = f"configuration does not fit the server: {exc}"
            self._log.error(self._config_error)
            self._hold(self._config_error, "config", now)
            self._drop_active(now)
            return
        self._config_error = None
        self._frames.clear()  # the image size may have changed
        self._generation += 1
        self._drop_active(now)
        self._active = _Active(
            spec=spec,
            scheduler=ChunkScheduler(sched_config, self._latency),
            builder=builder,
            outputs=outputs,
            used_dims=np.array([d for o in outputs for d in o.dims], dtype=np.intp),
            generation=self._generation,
        )
        self._log.info(
            f"connected: {cfg.model}, horizon {spec.action_horizon}, dt "
            f"{1000.0 * sched_config.dt:.1f} ms, execute {sched_config.execute_horizon}, "
            f"{cfg.request_mode} requests"
        )

    def disconnected(self, reason: str, now: float) -> None:
        """The connection was lost (the connection reconnects by itself)."""
        self._counts.connection_errors += 1
        self._hold(f"disconnected from the policy server: {reason}", "connection", now)
        self._drop_active(now)

    def result(self, outcome: Any, now: float) -> None:
        """What became of a submitted observation (a ``wire.connection.InferOutcome``)."""
        tag = outcome.tag
        if not isinstance(tag, RequestTag):
            return
        if outcome.sent_at is not None:
            to_wire = outcome.sent_at - tag.started
            self._timing.request_to_wire.add(to_wire)
            self._timing.image_to_wire.add(tag.frame_processing_s + to_wire)
        timing = getattr(outcome, "timing", None)
        if isinstance(timing, RequestTiming):
            network = self._network
            network.upload.add(timing.upload_s)
            network.download.add(timing.download_s)
            network.total.add(max(0.0, timing.total_s))
            network.request_bytes.add(timing.bytes_sent)
            if timing.server_s is not None:
                network.server.add(timing.server_s)
        active = self._active
        if active is None or tag.generation != active.generation:
            return  # a reply from before a reconnect: that scheduler is gone
        self._sent_at = None
        scheduler = active.scheduler
        if tag.session_id != self._session_id:
            # Sent before the episode reset: never execute it, but free the request slot.
            if scheduler.request_in_flight:
                scheduler.request_failed(now, "reply to an observation from before the reset")
            return
        if outcome.connection_error is not None:
            self._counts.connection_errors += 1
            scheduler.request_failed(now, outcome.connection_error)
            self._hold(
                f"connection lost during a request: {outcome.connection_error}", "connection", now
            )
            return
        reply = outcome.reply
        if isinstance(reply, dict) and reply.get("type") == "error":
            message = shorten(reply.get("message"))  # the server's text, bounded
            self._counts.error_replies += 1
            if self._error_messages.add(message):
                self._log.error(f"server refused the observation: {message}")
            scheduler.request_failed(now, message)
            self._hold(f"error reply from the server: {message}", "error_reply", now)
            return
        self._latency.add(now - tag.t_obs)
        self._counts.chunks_received += 1
        try:
            chunk = reply_to_chunk(reply, active.spec)
            if chunk.shape[1] <= int(active.used_dims.max()):
                raise ValueError(
                    f"actions have {chunk.shape[1]} dimensions; the outputs use dimension "
                    f"{int(active.used_dims.max())}"
                )
        except ValueError as exc:
            self._counts.error_replies += 1
            scheduler.request_failed(now, str(exc))
            self._refuse(f"malformed reply: {exc}", "malformed_reply", now)
            return
        # The whole reply is checked, uncommanded (padding) dimensions included: NaN or
        # Inf anywhere means the model output is broken. Limits bind the commanded ones.
        checked = check_chunk(
            chunk,
            self._limits(active, chunk.shape[1]),
            mode=cast(LimitsMode, self._cfg.limits_mode),
            horizon=active.spec.action_horizon,
        )
        if checked.refusal is not None or checked.chunk is None:
            reason = checked.refusal.reason if checked.refusal else "refused"
            scheduler.request_failed(now, reason)
            self._refuse(reason, "unsafe_chunk", now)
            return
        scheduler.chunk_received(checked.chunk[:, active.used_dims], tag.t_obs, now)

    def _limits(self, active: _Active, width: int) -> JointLimits:
        """Per-dimension limits of a ``width``-wide chunk: the configured joint limits
        on the commanded dimensions, unbounded elsewhere."""
        names: list[str | None] = [None] * width
        for output in active.outputs:
            for dim, joint in zip(output.dims, output.joints):
                names[dim] = joint
        return JointLimits.from_mapping(self._cfg.joint_limits, names)

    # ------------------------------------------------------------------ the loop
    def tick(self, now: float) -> None:
        """One timer period: publish what is due, request what is wanted."""
        active = self._active
        if active is None or not self._enabled:
            return
        scheduler = active.scheduler
        refusals: list[Refusal] = []

        def first_step(publication: Publication) -> Refusal | None:
            refusal = self._first_step_refusal(publication, now)
            if refusal is not None:
                refusals.append(refusal)
            return refusal

        publication = scheduler.poll(now, check=first_step)
        if refusals:
            self._refuse(refusals[0].reason, "first_step", now)
        elif publication is not None:
            self._publish_chunk(active, publication)
        if self._active is not active:
            return
        # After the publication, which must not wait for the frames.
        read_s = 0.0
        stored_before = self._frames.stored
        if self._read_frames is not None and self.wants_frames(now):
            read_started = self._perf_clock()
            self._read_frames(now)
            read_s = self._perf_clock() - read_started
        if scheduler.wants_request(now):
            # Reading the frames this tick is on the request's path to the wire.
            self._request(active, now, read_s, stored_before)

    def _request(
        self, active: _Active, now: float, read_s: float = 0.0, stored_before: int | None = None
    ) -> None:
        started = self._perf_clock() - read_s
        cfg = self._cfg
        missing = self._frames.missing()
        if missing:
            self._hold(f"no frame yet from camera(s) {missing}", "missing_input", now)
            return
        stamps = {f"camera '{key}'": t for key, t in self._frames.stamps().items()}
        stale = check_fresh(stamps, now, cfg.sensor_timeout_s)
        if stale is not None:
            self._hold(f"stale observation: {stale.reason}", "stale_input", now, refusal=True)
            return
        try:
            state = self._joints.vector(now, cfg.sensor_timeout_s)
        except JointStateError as exc:
            self._hold(f"joint states: {exc}", "joint_states", now, refusal=True)
            return
        try:
            # Frames read on this tick are inside ``started`` already.
            wire = self._frames.assemble(active.spec.image_size, timed_after=stored_before)
        except FrameConversionError as exc:
            # That camera falls back to its previous frame; the next tick tries again.
            self._input_refused(str(exc), now)
            return
        if wire.converted:
            per_frame = (wire.conversion_s + wire.read_s) / wire.converted
            for _ in range(wire.converted):
                self._timing.frame_processing.add(per_frame)
        observation = active.builder.build(
            wire.frames,
            state[: len(cfg.state_joints)],
            self._prompt,
            session_id=self._session_id,
            seed=cfg.seed,
            observation_time=now,
        )
        if active.spec.action_prefix:
            # Real-time chunking: the actions committed while the server infers.
            committed = committed_prefix(active.scheduler, now)
            if committed is not None:
                rows, steps = committed
                observation["action_prefix"] = to_action_space(
                    rows, active.used_dims.tolist(), active.spec.chunk_width
                )
                observation["committed_steps"] = steps
        tag = RequestTag(active.generation, self._session_id, now, started, wire.newest_prepared_s)
        if self._submit(observation, tag):
            active.scheduler.request_sent(now)
            self._sent_at = now
            self._counts.requests += 1

    def _first_step_refusal(self, publication: Publication, now: float) -> Refusal | None:
        measured = self._measured_commanded(now)
        if measured is None:
            return None
        cfg = self._cfg
        return check_first_step(
            measured, publication.positions[0], cfg.max_joint_step, cfg.commanded_joints
        )

    def _publish_chunk(self, active: _Active, publication: Publication) -> None:
        cfg = self._cfg
        # joint_trajectory_controller ignores header.frame_id; carrying the observation
        # time there lets the simulated arm (and bag readers) measure action age.
        tag = format_t_obs(publication.t_obs)
        column = 0
        for output in active.outputs:
            width = len(output.joints)
            points = build_points(publication, range(column, column + width))
            column += width
            target = None if cfg.dry_run else output.name
            self._publish_message(TrajectoryMessage(target, tag, output.joints, points))
        if not cfg.dry_run:
            points = build_points(publication, range(column))
            self._publish_message(TrajectoryMessage(None, tag, cfg.commanded_joints, points))
        self._counts.chunks_published += 1
        self._published_since_hold = True
        if self._hold_reason is not None:
            self._log.info(f"streaming again after: {self._hold_reason}")
        self._hold_reason = self._hold_kind = None

    def _measured_commanded(self, now: float) -> np.ndarray | None:
        try:
            vector = self._joints.vector(now, self._cfg.sensor_timeout_s)
        except JointStateError:
            return None
        order = {name: i for i, name in enumerate(self._joints.joint_names)}
        return np.array([vector[order[j]] for j in self._cfg.commanded_joints])

    # ------------------------------------------------------------------ holding
    def _refuse(self, reason: str, kind: str, now: float) -> None:
        """A chunk was refused by a safety check: count it, say why, hold."""
        self._counts.refusals += 1
        self._last_refusal = reason
        self._hold(reason, kind, now)

    def _hold(self, reason: str, kind: str, now: float, *, refusal: bool = False) -> None:
        """Stop following chunks: command the current position and say why.

        ``kind`` groups reasons whose text changes from tick to tick (a stale input's
        age): the log line is written when the kind changes, while ``/diagnostics``
        always shows the latest reason. ``refusal``: the observation was refused
        (stale or missing joint states, stale frames); counted once per hold, with
        ``last_refusal`` set, except before the first chunk, when inputs not there
        yet are expected, not a fault.
        """
        repeated = self._hold_kind == kind and self._hold_reason is not None
        self._hold_reason = reason
        self._hold_kind = kind
        if repeated:
            return
        startup = self._counts.chunks_published == 0
        if refusal and not startup:
            self._counts.refusals += 1
            self._last_refusal = reason
        if startup and kind in ("missing_input", "joint_states"):
            self._log.info(f"waiting before the first request: {reason}")
        else:
            self._log.warning(f"holding position: {reason}")
        active = self._active
        commanded = None
        if active is not None:
            commanded = active.scheduler.last_commanded(now)
            active.scheduler.reset()
        if not self._published_since_hold:
            return  # nothing of ours is moving the robot
        position = commanded if commanded is not None else self._measured_commanded(now)
        if position is None:
            return
        self._published_since_hold = False
        self._publish_hold(np.asarray(position, dtype=float), now)

    def _publish_hold(self, position: np.ndarray, now: float) -> None:
        cfg = self._cfg
        # Reach the hold point over a few cycles, not one: a message that arrives a
        # little late must not already "end in the past" for the controller.
        dt = 0.0 if self._active is None else self._active.scheduler.config.dt
        tfs = np.array([max(dt, HOLD_TIME_S)])
        column = 0
        for output in cfg.outputs:
            width = len(output.joints)
            positions = position[column : column + width].reshape(1, width)
            column += width
            points = TrajectoryPoints(positions, np.zeros_like(positions), tfs, float(now))
            target = None if cfg.dry_run else output.name
            self._publish_message(TrajectoryMessage(target, "", tuple(output.joints), points))

    def _drop_active(self, now: float) -> None:
        """Forget the server; keep the stall and drop totals of its scheduler."""
        self._sent_at = None
        active = self._active
        if active is not None:
            self._stall_before_s += active.scheduler.stall_time(now)
            self._dropped_before += active.scheduler.chunks_dropped_late
        self._active = None

    # ------------------------------------------------------------------ what is wrong
    @property
    def config_error(self) -> str | None:
        """Why the configuration does not fit the connected server, or None."""
        return self._config_error

    def stalled(self, now: float) -> str | None:
        """Why the robot stands still for want of a chunk, or None while a published
        trajectory still has points ahead (or no server is connected)."""
        active = self._active
        if active is None:
            return None
        current = active.scheduler.current
        if current is not None and now <= current.end_time:
            return None
        if current is None:
            message = "waiting for a chunk: nothing to follow yet"
        else:
            message = (
                f"stalled, waiting for a chunk: the last trajectory ended "
                f"{now - current.end_time:.2f} s ago"
            )
        if self._sent_at is not None:
            message += f"; a request has been in flight for {now - self._sent_at:.2f} s"
        return message
