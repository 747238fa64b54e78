"""The streaming core of policy_node: inputs in, safe trajectories out (no rclpy).

:class:`StreamingCore` holds everything policy_node decides, with time passed in, so
it is tested on a synthetic clock. It owns the server session, the episode, the
settings in force (live changes: :meth:`StreamingCore.apply_config`) and the order
of work; each job is a module of its own:

- **requests** (:mod:`~relay_ros.pipeline.observation_request`): camera reads, an
  observation from fresh, complete inputs
  (:mod:`~relay_ros.pipeline.observation_inputs`) handed to the connection, or a hold;
- **replies** (:mod:`~relay_ros.pipeline.reply_handling`): timed, judged, then
  scheduled, or a hold or refusal with the reason;
- **the gate** (:mod:`~relay_ros.pipeline.gate`): every trajectory the core sends,
  the due chunk and every hold, checked as the controller will run it;
- **clock jumps** (:mod:`~relay_ros.pipeline.clock_jump`): a new timeline, a hold;
- **bookkeeping** (:mod:`~relay_ros.pipeline.streaming_counts`): the counters; times
  in the request clock, the retry deadline and stall in the scheduler.

The jobs return their decisions as values (:mod:`~relay_ros.pipeline.gate.decisions`:
publish, hold, refuse) and :meth:`StreamingCore._act` carries each out in one place.

Not thread-safe: call it from one thread (the node's executor); replies cross from
the connection's worker thread through the node's queue.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from relay_ros.pipeline.adaptive_timing import AdaptiveTiming
from relay_ros.pipeline.camera_frames import CameraFrames
from relay_ros.pipeline.camera_map import CameraEntry
from relay_ros.pipeline.clock_jump import ClockJumps, restart_timeline
from relay_ros.pipeline.command_switches import CommandSwitches
from relay_ros.pipeline.frame_source import FrameSource
from relay_ros.pipeline.gate.decisions import Decision, Hold, Publish, Refuse
from relay_ros.pipeline.gate.gate import Gate
from relay_ros.pipeline.gate.messages import TrajectoryMessage
from relay_ros.pipeline.observation_inputs import DEFAULT_OBSERVATION_TIMING, ObservationTiming
from relay_ros.pipeline.observation_request import Requester, RequestTag
from relay_ros.pipeline.reply_handling import ReplyHandler
from relay_ros.pipeline.request_clock import RequestClock
from relay_ros.pipeline.server_session import (
    ServerSession,
    SessionError,
    SessionSlot,
    check_lora,
    lora_text,
)
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.pipeline.settings import (
    StreamingSettings,
    check_change,
    check_live_settings,
    scheduler_config,
)
from relay_ros.pipeline.stats import LatencyStats
from relay_ros.pipeline.streaming_counts import StreamingCounts
from relay_ros.pipeline.tick_plan import frames_wanted, next_deadline, stall_message

__all__ = ["ENABLE_STOP", "StreamingCore"]

#: Why the robot is stopped after ``~/enable`` false (the ``enable`` switch's reason).
ENABLE_STOP = "disabled through ~/enable (call ~/enable with true to command)"

#: The settings' type a core is made with (NodeConfig in the node), given back by ``config``.
SettingsT = TypeVar("SettingsT", bound=StreamingSettings)


class Logger(Protocol):
    """What the core logs through: rclpy's node logger or a ``logging.Logger``."""

    def info(self, message: str) -> Any: ...
    def warning(self, message: str) -> Any: ...
    def error(self, message: str) -> Any: ...


class StreamingCore(Generic[SettingsT]):
    """Decides when to request, what to publish and when to hold (see module docs).

    Args:
        config: The settings (a :class:`relay_ros.node.node_config.NodeConfig`).
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
        frame_sources: Camera key -> where :meth:`tick` reads that camera's newest
            frame while :meth:`wants_frames` (after a due chunk is published); on a
            tick that makes a request the reads count in ``request_to_wire``. None:
            frames are pushed with :meth:`frame_arrived` as they arrive.
        observation_timing: Which moment an observation shows: ``"frame_arrival"``
            (default), ``"frame"`` or ``"request"``
            (:mod:`~relay_ros.pipeline.observation_inputs`). Not a node parameter: a
            choice the benchmarks compare (docs/streaming.md).
        stopped: Switches that stop the core from the start, each with its reason
            (:mod:`~relay_ros.pipeline.command_switches`; e.g. ``{"lifecycle":
            "inactive"}`` for a node that is configured but not active). Empty: the
            core commands as soon as it can.
        joint_states_topic: The joint states' resolved topic, named in every hold
            reason about them (camera reasons name the topics of ``cameras``).
        timing: The rule of the automatic lead and execute horizon
            (:mod:`~relay_ros.pipeline.adaptive_timing`); None: its defaults. Not a
            node parameter either: the benchmarks compare rules.
    """

    def __init__(
        self,
        config: SettingsT,
        *,
        camera_keys: Sequence[str],
        submit: Callable[[dict[str, Any], RequestTag], bool],
        publish: Callable[[TrajectoryMessage], None],
        request_reset: Callable[[], None],
        log: Logger,
        perf_clock: Callable[[], float] = time.perf_counter,
        cameras: Sequence[CameraEntry] | None = None,
        deserialize: Callable[[bytes], Any] | None = None,
        frame_sources: Mapping[str, FrameSource] | None = None,
        observation_timing: ObservationTiming = DEFAULT_OBSERVATION_TIMING,
        stopped: Mapping[str, str] | None = None,
        joint_states_topic: str | None = None,
        timing: AdaptiveTiming | None = None,
    ) -> None:
        check_live_settings(config)
        self._cfg = config
        self._camera_keys = tuple(camera_keys)
        self._request_reset = request_reset
        self._publish = publish
        self._log = log
        self._clock = RequestClock(perf_clock)
        self._prompt = config.prompt
        self._session_id = uuid.uuid4().hex
        self._switches = CommandSwitches()
        for switch, reason in (stopped or {}).items():
            self._switches.set(switch, reason)
        self._counts = StreamingCounts()
        self._slot = SessionSlot(self._clock, self._counts, timing)
        self._requests = Requester(
            config,
            self._camera_keys,
            cameras,
            clock=self._clock,
            counts=self._counts,
            submit=submit,
            timing=observation_timing,
            sources=frame_sources,
            deserialize=deserialize,
            warning=log.warning,
            joint_states_topic=joint_states_topic,
        )
        self._inputs = self._requests.inputs
        self._gate = Gate(info=log.info, warning=log.warning, error=log.error)
        self._replies = ReplyHandler(
            self._clock, self._counts, log_error=log.error, log_warning=log.warning
        )
        self._jumps = ClockJumps()

    # ------------------------------------------------------------------ state
    @property
    def _session(self) -> ServerSession | None:
        return self._slot.current

    @property
    def config(self) -> SettingsT:
        """The settings in force."""
        return self._cfg

    @property
    def session_id(self) -> str:
        """The session id sent with observations; :meth:`reset_episode` starts a new one."""
        return self._session_id

    @property
    def enabled(self) -> bool:
        """Whether the core may command the robot: no switch (``~/enable``, the
        lifecycle state, the dead-man switch) stops it."""
        return self._switches.on

    @property
    def stop_reason(self) -> str | None:
        """Why a switch stops the robot (the first one's reason), or None."""
        return self._switches.reason

    @property
    def prompt(self) -> str:
        """The task instruction sent with the next observation."""
        return self._prompt

    @property
    def server(self) -> ServerSpec | None:
        """The server connected to, None before the first connect or after a
        disconnect or a configuration that does not fit it."""
        return None if self._session is None else self._session.spec

    @property
    def smoothing(self) -> str | None:
        """How chunks are joined now (the strategy in force, described), None without
        a server (:mod:`~relay_ros.pipeline.smoothing`)."""
        session = self._session
        return None if session is None else session.scheduler.config.smoothing.describe()

    @property
    def execute_horizon(self) -> int | None:
        """E for the next publication (the latency's when automatic), None without a
        server (:mod:`~relay_ros.pipeline.adaptive_timing`)."""
        session = self._session
        return None if session is None else session.scheduler.execute_horizon()

    @property
    def request_lead_s(self) -> float | None:
        """The lead of the next early request (s; 0 in sync mode), None without a server."""
        session = self._session
        return None if session is None else session.scheduler.request_lead()

    @property
    def image_size(self) -> tuple[int, int] | None:
        """(height, width) frames are resized to; None until a server is known
        (frames before that are useless)."""
        return None if self._session is None else self._session.spec.image_size

    @property
    def counts(self) -> dict[str, int]:
        """Requests, chunks received/published/dropped late, error replies,
        refusals, connection errors and frames received so far."""
        scheduler = None if self._session is None else self._session.scheduler
        counts = self._counts.as_dict()
        counts["frames_received"] = self._inputs.frames_received
        counts["joint_samples_rejected"] = self._inputs.joints.rejected_samples
        counts["chunks_clamped"] = self._gate.clamped
        counts["holds_sent"] = self._gate.holds_sent
        counts["holds_not_sent"] = self._gate.holds_not_sent
        counts["clock_jumps"] = self._jumps.count
        counts["chunks_dropped_late"] = self._counts.dropped_late(scheduler)
        return counts

    @property
    def last_refusal(self) -> str | None:
        """Why the last refused chunk, observation (stale inputs), frame or joint
        state message was refused, in a sentence; it changes exactly when
        ``counts["refusals"]`` grows."""
        return self._counts.last_refusal

    @property
    def last_clamp(self) -> str | None:
        """What clamp mode last changed in a published trajectory, in a sentence."""
        return self._gate.last_clamp

    @property
    def hold_reason(self) -> str | None:
        """Why the robot is held now, or None while streaming."""
        return self._gate.reason

    @property
    def latency(self) -> LatencyStats:
        """Observation -> reply latencies on the node clock, every action reply
        (refused ones too), kept across reconnects."""
        return self._clock.latency

    @property
    def pipeline_timing(self) -> dict[str, LatencyStats]:
        """Seconds spent per frame (``frame_processing``, its read included), from the
        request's tick to the observation on the wire (``request_to_wire``, the reads
        of that tick included), and for the newest frame of each request its
        processing on an earlier tick plus ``request_to_wire`` (``image_to_wire``)."""
        return self._clock.pipeline

    @property
    def network_timing(self) -> dict[str, LatencyStats]:
        """Per request: ``upload``, ``server``, ``download`` and ``total`` seconds
        (:class:`~relay_ros.wire.request_timing.RequestTiming`) and ``request_bytes``."""
        return self._clock.network

    @property
    def frames(self) -> CameraFrames:
        """The newest message of each camera (and how frames are encoded)."""
        return self._inputs.frames

    def commanded_at(self, t: float) -> np.ndarray | None:
        """Where the controllers were commanded to be at ``t`` (``commanded_joints``
        order), as they interpolate what was accepted and the holds; None while
        nothing of ours commands them (before the first trajectory, in a dry run)."""
        state = self._gate.motion.state_at(t)
        return None if state is None else state[0]

    def request_timeout(self) -> float:
        """Seconds one request may take before the connection drops it and reconnects
        (:meth:`RequestClock.request_timeout` for ``request_timeout_s``). Safe to call
        from the connection's worker thread."""
        return self._clock.request_timeout(self._cfg.request_timeout_s)

    def stall_time(self, now: float) -> float:
        """Seconds the controllers had no future point to follow while streaming."""
        scheduler = None if self._session is None else self._session.scheduler
        return self._counts.stall_time(scheduler, now)

    # ------------------------------------------------------------------ inputs
    def wants_frames(self, now: float) -> bool:
        """Whether the cameras should be read now: streaming, and the next request is
        due within ``FRAME_LOOKAHEAD_S`` (:func:`~relay_ros.pipeline.tick_plan.frames_wanted`)."""
        session = self._session
        if session is None or not self._switches.on:
            return False
        return frames_wanted(session.scheduler, now)

    def next_deadline(self, now: float) -> float | None:
        """When :meth:`tick` next has work, on the node clock
        (:func:`~relay_ros.pipeline.tick_plan.next_deadline`); ``None`` when only an
        event can bring work (a reply or a failure, a connection, ``set_switch``).

        A node may tick at that time instead of on a fixed period, as long as it
        also ticks after every event.
        """
        session = self._session
        if session is None or not self._switches.on:
            return None
        return next_deadline(session.scheduler, now, 1.0 / self._cfg.tick_hz)

    def frame_arrived(self, key: str, msg: Any, now: float, *, read_s: float = 0.0) -> None:
        """Keep ``msg`` as camera ``key``'s newest message (a serialized or message
        ``sensor_msgs/Image``, a ``CompressedImage``, or an RGB array), received at
        ``now``; ``read_s`` is the wall time spent reading it from the middleware
        (counted in its frame processing time). For frames pushed as they arrive;
        a core with ``frame_sources`` reads them itself.

        It is converted now only when the next request is due before that camera's
        next frame; otherwise when an observation needs it. A message that does not
        convert is refused (counted, logged at most every 5 s) without holding: the
        camera's previous frame stays until it is stale.
        """
        session = self._session
        request_at = None if session is None else session.scheduler.next_request_time()
        self._inputs.store_frame(key, msg, now, request_at, self.image_size, read_s=read_s)

    def joint_state(
        self,
        names: Sequence[str],
        positions: Sequence[float],
        now: float,
        measured_at: float | None = None,
    ) -> None:
        """Positions from one ``JointState`` message received at ``now`` (header stamp
        ``measured_at``: when plausible, the publication check compares the arm with
        what was commanded then); a malformed message is refused like a bad frame, a
        sample implying far more than a joint's velocity limit is rejected
        (:mod:`~relay_ros.pipeline.state`)."""
        self._inputs.joint_state(names, positions, now, measured_at, limits=self._cfg.joint_limits)

    def set_prompt(self, text: str) -> None:
        """Replace the task instruction from the next observation on."""
        if text != self._prompt:
            self._log.info(f"prompt changed to {text!r}")
        self._prompt = text

    # ------------------------------------------------------------------ commands
    def reset_episode(self, now: float) -> str:
        """Start a new episode: new session id, server reset, hold until a chunk
        of the new session arrives. Returns the sentence for the service reply.

        The hold goes out first, from the commanded state (the arm may be moving),
        then the schedule is reset."""
        self._session_id = uuid.uuid4().hex
        self._request_reset()
        self._act(Hold("episode reset: waiting for a chunk from the new session", "reset"), now)
        if self._session is not None:
            self._session.scheduler.reset()
        message = f"new episode, session {self._session_id}"
        self._log.info(message)
        return message

    def set_enabled(self, enabled: bool, now: float) -> str:
        """Start or stop commanding (``~/enable``, the ``enable`` switch); returns what
        happened."""
        if enabled != self._switches.stops("enable"):
            message = "already " + ("enabled" if enabled else "disabled")
        elif not enabled:
            self.set_switch("enable", ENABLE_STOP, now)
            message = "disabled: holding position"
        else:
            self.set_switch("enable", None, now)
            message = (
                "enabled: commanding from the next fresh observation"
                if self._switches.on
                else f"enabled, but not commanding: {self._switches.reason}"
            )
        self._log.info(message)
        return message

    def set_switch(self, switch: str, stop: str | None, now: float) -> None:
        """Switch ``switch`` stops the robot for reason ``stop``, or is released (None)
        (:mod:`~relay_ros.pipeline.command_switches`).

        The first stop holds (the hold message once, if a trajectory of ours moves
        the robot) and ends requests and publications; another stop while stopped
        only changes the reason shown; releasing the last one commands again from
        the next fresh observation.

        Raises:
            ValueError: an unknown switch, or a stop without a reason.
        """
        was_on = self._switches.on
        before = self._switches.reason
        self._switches.set(switch, stop)
        reason = self._switches.reason
        if reason is None:
            if not was_on:
                self._gate.clear()
        elif reason != before:
            self._act(Hold(reason, "stopped"), now)

    def apply_config(self, config: SettingsT, now: float) -> None:
        """Run with ``config`` from now on; takes effect before this returns.

        The settings of :data:`~relay_ros.pipeline.settings.LIVE_SETTINGS` change.
        Switching ``dry_run`` on sends the controllers a hold from the commanded
        state first, so nothing keeps moving the robot; switching it off starts
        commanding from the next chunk (first-step check included).
        A new ``lora`` or ``lora_scale`` is a new episode (:meth:`reset_episode`):
        the chunks queued and in flight came from the other adapter, and the
        server's session (its random stream, its committed actions) belongs to it;
        the robot holds until the new adapter's first chunk.

        Raises:
            StreamingConfigError: a setting that only a restart changes
                (:data:`~relay_ros.pipeline.settings.FIXED_SETTINGS`: model, joints,
                outputs, rates, encoding), or values the connected server cannot
                run with (an adapter it does not serve); nothing is changed then.
        """
        check_change(self._cfg, config)
        session = self._session
        sched_config = (
            None
            if session is None
            else scheduler_config(config, session.spec, timing=self._slot.timing)
        )
        if session is not None:
            check_lora(config.lora, session.spec)
        old = self._cfg
        if config.dry_run and not old.dry_run:
            # Still routed to the controllers: stop them where they are.
            reason = "dry_run switched on: controllers hold, chunks go to ~/preview"
            self._act(Hold(reason, "config"), now)
        self._cfg = config
        if config.prompt != old.prompt:
            self.set_prompt(config.prompt)
        if session is not None and sched_config is not None:
            session.scheduler.reconfigure(sched_config)
            if config.dry_run != old.dry_run:
                session.scheduler.reset()  # the next chunk starts from the robot, not the preview
        if config.dry_run != old.dry_run:
            # What went to ~/preview never moved the robot: a hold must not move it there.
            self._gate.dry_run_changed(config.dry_run)
        self._log.info("configuration changed")
        if (config.lora, config.lora_scale) != (old.lora, old.lora_scale):
            self._log.info(f"policy adapter: {lora_text(config.lora, config.lora_scale)}")
            self.reset_episode(now)

    def clock_jumped(self, delta_s: float, now: float) -> None:
        """The node clock jumped by ``delta_s`` seconds (``use_sim_time``; ``now`` is the
        new time): restart the timeline, forget the inputs, hold, WARN for a while
        (:mod:`~relay_ros.pipeline.clock_jump`)."""
        reason = self._jumps.jumped(delta_s, now)
        if self._session is not None:
            restart_timeline(self._session, self._counts, delta_s, now)
        self._inputs.clear(jump=(now - delta_s, now))
        self._gate.clock_jumped(delta_s, now)  # the controllers' state, on the new timeline
        self._act(Hold(reason, "clock_jump"), now)

    def clock_notice(self, now: float) -> str | None:
        """The last clock jump's sentence for a few seconds after it, else None."""
        return self._jumps.notice(now)

    # ------------------------------------------------------------------ connection events
    def connected(self, metadata: Mapping[str, Any], now: float) -> None:
        """The connection (re)connected; ``metadata`` is what the server announced."""
        try:
            session = self._slot.open(metadata, self._cfg, camera_keys=self._camera_keys, now=now)
        except SessionError:
            reason = self._slot.config_error
            assert reason is not None
            self._log.error(reason)
            self._act(Hold(reason, "config"), now)
            self._slot.drop(now)
            return
        self._inputs.clear_frames()  # the image size may have changed
        self._log.info(session.describe(self._cfg))

    def disconnected(self, reason: str, now: float) -> None:
        """The connection was lost (the connection reconnects by itself)."""
        self._counts.connection_errors += 1
        self._act(Hold(f"disconnected from the policy server: {reason}", "connection"), now)
        self._slot.drop(now)

    def result(self, outcome: Any, now: float) -> None:
        """What became of a submitted observation (a ``wire.connection.InferOutcome``):
        timed, judged, then scheduled or refused
        (:class:`~relay_ros.pipeline.reply_handling.ReplyHandler`)."""
        decision = self._replies.handle(
            outcome, self._session, now, session_id=self._session_id, settings=self._cfg
        )
        self._act(decision, now)

    # ------------------------------------------------------------------ the loop
    def tick(self, now: float) -> None:
        """One timer period: publish what is due, read the cameras when a request is
        near, request what is wanted."""
        session = self._session
        if session is None or not self._switches.on:
            return
        if (problem := self._cfg.limits_problem) is not None:  # no limits
            self._act(Hold(f"cannot command: {problem}", "no_limits"), now)
            return
        measured, measured_at = self._measured(now)
        self._act(
            self._gate.publish_due(
                session, now, self._cfg, measured=measured, measured_at=measured_at
            ),
            now,
        )
        if self._session is not session:
            return
        # After the publication (it must not wait for the frames).
        hold = self._requests.run(
            session,
            now,
            self._cfg,
            prompt=self._prompt,
            session_id=self._session_id,
            followed=lambda: self._gate.followed(
                now, self._cfg, measured=measured, measured_at=measured_at
            ),
        )
        self._act(hold, now)

    def _measured(self, now: float) -> tuple[np.ndarray | None, float | None]:
        """The commanded joints' measured positions (None: missing or stale) and when
        they were measured."""
        cfg = self._cfg
        joints = cfg.commanded_joints
        measured = self._inputs.measured(now, cfg.sensor_timeout_s, joints)
        return measured, self._inputs.measured_at(joints) if measured is not None else None

    # ------------------------------------------------------------------ decisions
    def _act(self, decision: Decision | None, now: float) -> None:
        """Carry out a job's decision: the one place anything is published."""
        if decision is None:
            return
        if isinstance(decision, Publish):
            for message in decision.messages:
                self._publish(message)
            self._counts.chunks_published += 1
            self._gate.streaming()
            return
        if isinstance(decision, Refuse):
            # A chunk or reply refused by a check: counted, then a hold with its reason.
            self._counts.refused(decision.reason)
            decision = Hold(decision.reason, decision.kind)
        self._hold(decision, now)

    def _hold(self, decision: Hold, now: float) -> None:
        """Hold for ``decision`` (:meth:`~relay_ros.pipeline.gate.gate.Gate.hold`): the
        stop goes out from the commanded state, then the schedule is reset, so the next
        chunk starts from where the robot stands (the next request waits until the stop
        has settled)."""
        session = self._session
        scheduler = None if session is None else session.scheduler
        startup = self._counts.chunks_published == 0
        measured, measured_at = self._measured(now)
        result = self._gate.hold(
            decision,
            now,
            settings=self._cfg,
            scheduler=scheduler,
            startup=startup,
            measured=measured,
            measured_at=measured_at,
        )
        if not result.new:
            return
        if decision.refusal and not startup:
            self._counts.refused(decision.reason)
        for message in result.messages:
            self._publish(message)
        if scheduler is not None:
            scheduler.reset(not_before=result.settles)

    # ------------------------------------------------------------------ what is wrong
    @property
    def config_error(self) -> str | None:
        """Why the configuration does not fit the connected server, or None."""
        return self._slot.config_error

    def stalled(self, now: float) -> str | None:
        """Why the robot stands still for want of a chunk, or None while a published
        trajectory still has points ahead (or no server is connected)."""
        session = self._session
        if session is None:
            return None
        return stall_message(session.scheduler, self._clock.in_flight_for(now), now)
