"""policy_node's recording: episodes as LeRobot datasets while the node runs.

With ``record_dir`` set, policy_node builds one :class:`EpisodeRecording`. It is the
ROS side of :mod:`relay_ros.recording` and only observes what the streaming core
decides:

- frames are recorded while the node is active (lifecycle, :meth:`EpisodeRecording.set_active`):
  a deactivate ends the episode in progress, and the next starts with the first frame
  after activate (an inactive node commands nothing and records nothing);
- a timer at ``record_fps`` (in the node's callback group, so it never runs beside a
  tick) reads the joint states and each camera's newest frame (the cameras through
  :class:`~relay_ros.recording.frames.SharedFrameSource`, so the core still sees
  every frame), asks the core where the controllers were commanded to be at that
  instant (:meth:`StreamingCore.commanded_at`), who is in control (the policy while
  the core is enabled; a human while it is disabled), and the prompt, and hands the
  frame (:class:`~relay_ros.recording.frames.FrameAssembler`) to the recorder's
  bounded queue; the conversion, the video encoding and the writing run on the
  recorder's own thread (:mod:`relay_ros.recording.recorder`);
- the dataset's layout follows the connected server (its ``image_size`` and action
  groups: :func:`~relay_ros.recording.plan.plan_recording`);
- an episode ends on ``~/reset``, ``~/enable`` false, ``~/mark_episode`` (std_srvs
  SetBool: ``data`` true = success, false = failure) and ``~/end_episode`` (Trigger,
  no mark), on a jump of the node clock (:meth:`EpisodeRecording.clock_jumped`), and,
  through :meth:`EpisodeRecording.end_episode`, on whatever else the node decides (a
  lifecycle deactivate, shutdown);
- its status is one more ``DiagnosticStatus`` on ``/diagnostics`` ("<node>:
  recording"): WARN while frames are being dropped or skipped, ERROR once recording
  stopped (a full disk), the counts as values.

The dataset directory is opened (and a crashed run's partial episode repaired or
discarded, with a log line) when the node starts, so a ``record_dir`` that cannot be
recorded into, or a codec this PyAV lacks, stops the node at start with the reason.
"""

from __future__ import annotations

import array
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from std_srvs.srv import SetBool, Trigger

from relay_ros.node.node_config import NodeConfig
from relay_ros.node.param_spec import ParameterError
from relay_ros.node.qos import RELIABLE
from relay_ros.node.ros_logging import node_logger
from relay_ros.pipeline.camera_map import CameraEntry
from relay_ros.pipeline.frame_source import FrameSource
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.pipeline.stats import LatencyStats
from relay_ros.pipeline.streaming import StreamingCore
from relay_ros.recording.dataset import Dataset, DatasetError
from relay_ros.recording.episode import EpisodeContext, config_json
from relay_ros.recording.frames import FrameAssembler, SharedFrameSource, Skip
from relay_ros.recording.plan import RecordingPlan, plan_recording
from relay_ros.recording.recorder import Recorder
from relay_ros.recording.video import VideoCodecError, VideoSettings

__all__ = ["EpisodeRecording"]

# A status stays WARN this long after frames were dropped or skipped (s, wall clock).
_WARN_AFTER_MISS_S = 5.0
# A record tick later than this many periods counts the periods it missed.
_LATE_PERIODS = 1.5
# The recording tick reads no camera when the core has work due within this long (s).
_QUIET_S = 0.005


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{1000.0 * seconds:.2f}"


def _value(value: Any) -> Any:
    """A parameter value JSON can hold (rclpy gives numeric arrays as array.array)."""
    return list(value) if isinstance(value, (array.array, tuple)) else value


class EpisodeRecording:
    """Records policy_node's episodes (see the module docstring).

    Args:
        node: The policy node.
        config: Its validated parameters (``record_dir`` set).
        cameras: The camera map's entries.
        core: Gives the streaming core (built after this object).
        read_inputs: Takes the joint states queued since the last tick, into the core
            and :meth:`joint_state` (the node's own read).
        group: The node's callback group for the timers and services.
        deserialize: rclpy's ``Image`` deserializer, for frames the CDR reader refuses.

    Raises:
        ParameterError: ``record_dir`` cannot be recorded into, or the codec is not
            available (the node does not start).
    """

    def __init__(
        self,
        node: Node,
        config: NodeConfig,
        cameras: Sequence[CameraEntry],
        *,
        core: Callable[[], StreamingCore[NodeConfig]],
        read_inputs: Callable[[float], None],
        group: CallbackGroup,
        polled_group: CallbackGroup,
        deserialize: Callable[[bytes], Any] | None = None,
    ) -> None:
        assert config.record_dir is not None
        self._node = node
        self._config = config
        self._cameras = tuple(cameras)
        self._core = core
        self._read_inputs = read_inputs
        self._deserialize = deserialize
        self._log = node_logger(node.get_logger(), f"relay_ros.recording.{node.get_name()}")
        settings = VideoSettings(vcodec=config.record_video_codec)
        try:
            settings.check_available()
            dataset = Dataset(config.record_dir, log=self._log)
        except (VideoCodecError, DatasetError) as exc:
            raise ParameterError(f"parameter record_dir/record_video_codec: {exc}") from None
        except OSError as exc:
            raise ParameterError(
                f"parameter 'record_dir' is '{config.record_dir}': {exc.strerror or exc}"
            ) from None
        self._recorder = Recorder(
            dataset,
            settings=settings,
            log=self._log,
            queue_frames=config.record_queue_frames,
            context=self._context(config),
        )
        self._shared: dict[str, SharedFrameSource] = {}
        self._period = 1.0 / config.record_fps
        self._spec: ServerSpec | None = None
        self._plan: RecordingPlan | None = None
        self._assembler: FrameAssembler | None = None
        self._context_for: NodeConfig | None = config
        self._last_tick: float | None = None
        self._jumped = False
        self._tick_time = LatencyStats()
        self._last_skip: str | None = None
        self._last_miss_wall = -float("inf")
        self._misses_seen = 0
        self._active = False  # the node is active (lifecycle): frames are recorded
        self._timer = node.create_timer(self._period, self._tick, callback_group=group)
        self._services = [
            node.create_service(SetBool, "~/mark_episode", self._on_mark, callback_group=group),
            node.create_service(Trigger, "~/end_episode", self._on_end, callback_group=group),
        ]
        self._diagnostics = node.create_publisher(
            DiagnosticArray, "/diagnostics", RELIABLE, callback_group=polled_group
        )
        self._diag_timer = node.create_timer(1.0, self._publish_status, callback_group=group)
        self._log.info(
            f"recording episodes into '{config.record_dir}' at {config.record_fps} fps "
            f"({config.record_video_codec}) while the node is active, from the first "
            "connection to a server"
        )

    # ------------------------------------------------------------------ node side
    def share_frames(self, sources: Mapping[str, FrameSource]) -> dict[str, SharedFrameSource]:
        """The node's camera frame sources, shared: give the result to the streaming
        core; the recorder reads the same subscriptions and both see every frame."""
        self._shared = {key: SharedFrameSource(source) for key, source in sources.items()}
        return dict(self._shared)

    @property
    def recorder(self) -> Recorder:
        """The recorder (its status, for tests and benchmarks)."""
        return self._recorder

    def joint_state(
        self, names: Sequence[str], positions: Sequence[float], received: float
    ) -> None:
        """One ``JointState`` message, received at ``received`` (node clock)."""
        if self._assembler is not None:
            self._assembler.joint_state(names, positions, received)

    def set_active(self, active: bool) -> None:
        """The node became active (frames are recorded from the next tick on) or left
        *active* (none are; end the episode first, :meth:`end_episode`)."""
        self._active = bool(active)
        self._last_tick = None  # the inactive time is neither missed frames nor a jump

    @property
    def active(self) -> bool:
        """Whether frames are recorded (the node is active)."""
        return self._active

    def clock_jumped(self) -> None:
        """The node clock jumped (rclpy's jump callback, as the streaming core is told):
        the next tick ends the episode, whose frames' times are on the old timeline.

        A tick that comes a second or more after the last one is no jump by itself: a
        loaded machine's executor runs it that late (its periods count as missed)."""
        self._jumped = True

    def end_episode(self, reason: str, success: bool | None = None) -> str:
        """End the episode in progress (``reason``; ``success``: the operator's mark);
        returns the sentence for a service reply. Frames already queued still belong
        to it; it is written on the recorder's thread."""
        return self._end(reason, success)[1]

    def _end(self, reason: str, success: bool | None) -> tuple[bool, str]:
        """:meth:`end_episode`, and whether an episode ended (a service's ``success``)."""
        status = self._recorder.status()
        if status.state == "stopped":
            return False, f"not recording: {status.error}"
        ended = self._recorder.end_episode(reason, success)
        if ended is None:
            return False, "no episode in progress"
        mark = {None: "not marked", True: "success", False: "failure"}[success]
        return True, (
            f"episode {ended.index} ends ({ended.frames} frames, {mark}, by {reason}); "
            "it is written in the background"
        )

    def close(self) -> None:
        """End the episode in progress ("shutdown"), wait for it to be written, and
        remove the timers, services and publisher (the node's cleanup transition may
        configure it again)."""
        node = self._node
        self._timer.cancel()
        self._diag_timer.cancel()
        self._recorder.close("shutdown")
        node.destroy_timer(self._timer)
        node.destroy_timer(self._diag_timer)
        for service in self._services:
            node.destroy_service(service)
        node.destroy_publisher(self._diagnostics)

    # ------------------------------------------------------------------ the tick
    def _now(self) -> float:
        return self._node.get_clock().now().nanoseconds * 1e-9

    def _context(self, config: NodeConfig) -> EpisodeContext:
        node = self._node
        # rclpy annotates get_parameters_by_prefix with value types; it returns Parameters.
        parameters = {
            name: _value(p.value)  # type: ignore[union-attr]
            for name, p in node.get_parameters_by_prefix("").items()
        }
        lora = parameters.get("lora")
        return EpisodeContext(
            source="policy_node",
            config_json=config_json(parameters),
            adapter=str(lora) if lora else None,
        )

    def _update_plan(self, core: StreamingCore[NodeConfig]) -> None:
        """A new server: the layout it gives (the recorder checks it against the dataset)."""
        spec = core.server
        if spec is None or spec is self._spec:
            return
        self._spec = spec
        try:
            plan = plan_recording(core.config, self._cameras, spec)
        except ValueError as exc:
            self._log.error(f"recording waits: the outputs do not fit the server: {exc}")
            return
        if self._plan is not None and plan.layout == self._plan.layout:
            return
        if self._plan is not None:
            self._recorder.end_episode("server changed")
        self._plan = plan
        self._assembler = plan.assembler()
        self._recorder.set_layout(plan.layout, plan.converter(self._deserialize))

    @property
    def tick_time(self) -> LatencyStats:
        """Seconds each recording tick took on the executor (its last 100)."""
        return self._tick_time

    def _tick(self) -> None:
        started = time.perf_counter()
        try:
            self._record_frame()
        finally:
            self._tick_time.add(time.perf_counter() - started)

    def _record_frame(self) -> None:
        if not self._active:
            return
        now = self._now()
        core = self._core()
        last, self._last_tick = self._last_tick, now
        jumped, self._jumped = self._jumped, False
        if jumped or (last is not None and now < last):
            if self._assembler is not None:
                self._assembler.clear()  # their times are on the old timeline
            self._recorder.end_episode("clock jump")
        elif last is not None and now - last > _LATE_PERIODS * self._period:
            self._recorder.missed(round((now - last) / self._period) - 1)
        if core.config is not self._context_for:  # a live parameter change
            self._context_for = core.config
            self._recorder.set_context(self._context(core.config))
        self._update_plan(core)
        assembler = self._assembler
        if assembler is None:
            return
        self._read_inputs(now)
        # Copying a raw frame out of the middleware takes ~1 ms of this thread: not
        # while the core reads the cameras itself (it does on every tick before a
        # request, and the frames it takes are shared) or has a publication due.
        deadline = core.next_deadline(now)
        pull = not core.wants_frames(now) and (deadline is None or deadline - now > _QUIET_S)
        for key, source in self._shared.items():
            frame = source.take_for_recording(now, pull=pull)
            if frame is not None:
                assembler.frame(key, frame.msg, frame.received)
        commanding = core.enabled and not core.config.dry_run
        sample = assembler.sample(
            now,
            commanded=core.commanded_at(now) if commanding else None,
            intervention=not core.enabled,
            task=core.prompt,
        )
        if isinstance(sample, Skip):
            self._last_skip = sample.reason
            self._recorder.missed()
        elif not self._recorder.offer(sample):
            self._last_skip = "the recorder's queue is full"

    # ------------------------------------------------------------------ diagnostics
    def diagnostics_status(self) -> DiagnosticStatus:
        """The recording's health: OK, WARN (frames missed in the last 5 s), ERROR
        (recording stopped)."""
        status = self._recorder.status()
        misses = status.frames_dropped + status.frames_skipped
        wall = time.monotonic()
        if misses != self._misses_seen:
            self._misses_seen = misses
            self._last_miss_wall = wall
        if status.state == "stopped":
            level, message = DiagnosticStatus.ERROR, str(status.error or "recording stopped")
        elif not self._active and status.episode is None:
            level, message = DiagnosticStatus.OK, "not recording: the node is not active"
        elif wall - self._last_miss_wall < _WARN_AFTER_MISS_S:
            level = DiagnosticStatus.WARN
            message = f"recording misses frames: {self._last_skip}"
        elif status.state == "recording":
            level = DiagnosticStatus.OK
            message = f"recording episode {status.episode} ({status.episode_frames} frames)"
        elif status.state == "waiting":
            level, message = DiagnosticStatus.OK, "waiting for a server (it sets the image size)"
        else:
            level, message = DiagnosticStatus.OK, "between episodes"
        out = DiagnosticStatus()
        out.name = f"{self._node.get_fully_qualified_name()}: recording"  # robots apart
        out.hardware_id = str(self._config.record_dir)
        out.level = level
        out.message = message
        values = {
            "record_dir": str(self._config.record_dir),
            "state": status.state,
            "episodes": str(status.episodes),
            "episode frames": str(status.episode_frames),
            "frames dropped": str(status.frames_dropped),
            "frames skipped": str(status.frames_skipped),
            "queued": str(status.queued),
            "last miss": self._last_skip or "",
            "record tick p50 ms": _ms(self._tick_time.p50),
            "record tick p99 ms": _ms(self._tick_time.p99),
        }
        out.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        return out

    def _publish_status(self) -> None:
        array_msg = DiagnosticArray()
        array_msg.header.stamp = self._node.get_clock().now().to_msg()
        array_msg.status = [self.diagnostics_status()]
        self._diagnostics.publish(array_msg)

    # ------------------------------------------------------------------ services
    def _on_mark(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        response.success, response.message = self._end("mark_episode", bool(request.data))
        return response

    def _on_end(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success, response.message = self._end("end_episode", None)
        return response
