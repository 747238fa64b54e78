"""The request half of a tick: read the cameras, take an observation, hand it over.

The scheduler says *when* a chunk is wanted; :class:`Requester` reads the cameras
shortly before (each camera's newest frame, in the window before the request), takes
an observation from fresh, complete inputs only
(:mod:`~relay_ros.pipeline.observation_inputs`; else an
:class:`~relay_ros.pipeline.observation_inputs.InputProblem` for the core to hold
on), builds it (:func:`build_observation`, with the ``action_prefix`` keys of
:mod:`~relay_ros.pipeline.action_prefix` when the smoothing in force is the server's
prefix) and hands it to
the connection with a :class:`RequestTag`, which comes back with the reply so that a
reply from before a reconnect or an episode reset is never executed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay_ros.pipeline.action_prefix import add_prefix_keys
from relay_ros.pipeline.camera_map import CameraEntry
from relay_ros.pipeline.frame_source import FrameSource
from relay_ros.pipeline.gate.decisions import Hold
from relay_ros.pipeline.interpolation import ControllerTrajectory
from relay_ros.pipeline.observation_inputs import (
    OBSERVATION_TIMINGS,
    InputProblem,
    ObservationInputs,
    ObservationTiming,
    Snapshot,
)
from relay_ros.pipeline.request_clock import RequestClock, RequestStart
from relay_ros.pipeline.server_session import ServerSession
from relay_ros.pipeline.settings import StreamingSettings
from relay_ros.pipeline.streaming_counts import StreamingCounts
from relay_ros.pipeline.tick_plan import frames_just_came, frames_wanted

__all__ = [
    "INPUT_WARNING_PERIOD_S",
    "RequestTag",
    "Requester",
    "build_observation",
    "sampling_params",
]

#: A refused camera frame or joint state message is logged at most this often (each
#: refusal is counted).
INPUT_WARNING_PERIOD_S = 5.0


@dataclass(frozen=True)
class RequestTag:
    """Travels with each observation through the connection and back with its reply.

    Attributes:
        generation: Which connection the request was made on; a reply from an
            earlier one is dropped (its scheduler is gone).
        timeline: Which scheduler of that connection: a jump of the node clock
            starts a new one, and a reply from before it is dropped.
        session_id: The episode; a reply from before ``~/reset`` is never executed.
        t_obs: Observation time on the node clock (s).
        start: The request's start on the core's
            :class:`~relay_ros.pipeline.request_clock.RequestClock`.
        origin: Where the commanded joints are commanded to be at ``t_obs`` (output
            order; the measured state before anything was commanded): joint
            velocity actions are integrated from it. None when the server's actions
            are all positions.
    """

    generation: int
    timeline: int
    session_id: str
    t_obs: float
    start: RequestStart
    origin: tuple[float, ...] | None = None


def sampling_params(lora: str, scale: float) -> dict[str, Any] | None:
    """The ``sampling_params`` that select LoRA adapter ``lora`` at ``scale`` (the seed's
    forms: the name alone at scale 1, else ``{"name", "scale"}``); None for the base
    model (no key at all, which every server takes)."""
    if not lora:
        return None
    return {"lora": lora if scale == 1.0 else {"name": lora, "scale": float(scale)}}


def build_observation(
    session: ServerSession,
    snapshot: Snapshot,
    settings: StreamingSettings,
    *,
    prompt: str,
    session_id: str,
    joint_names: Sequence[str],
    requested_at: float,
    followed: ControllerTrajectory | None = None,
) -> tuple[dict[str, Any], int]:
    """The observation of ``snapshot`` for ``session``'s model, and how many of the
    scheduler's committed steps it carries as ``action_prefix`` (0 when the smoothing
    in force is not the server's prefix).

    ``joint_names`` orders ``snapshot.state`` (the inputs' watched joints, state
    joints first); the prefix continues ``followed`` (what the controllers follow)
    and, while nothing of ours runs, the commanded joints' positions in it.
    """
    observation = session.builder.build(
        snapshot.frames.frames,
        snapshot.state[: len(settings.state_joints)],
        prompt,
        session_id=session_id,
        seed=settings.seed,
        sampling_params=sampling_params(settings.lora, settings.lora_scale),
        observation_time=snapshot.t_obs,
    )
    if not session.scheduler.config.smoothing.needs_prefix:
        return observation, 0
    order = {name: i for i, name in enumerate(joint_names)}
    commanded = np.array([snapshot.state[order[j]] for j in settings.commanded_joints])
    committed = add_prefix_keys(
        observation,
        session.scheduler,
        snapshot.t_obs,
        commanded,
        followed=followed,
        requested_at=requested_at,
        used_dims=session.reader.used_dims.tolist(),
        chunk_width=session.spec.chunk_width,
    )
    return observation, committed


def commanded_origin(
    followed: ControllerTrajectory | None,
    snapshot: Snapshot,
    settings: StreamingSettings,
    joint_names: Sequence[str],
) -> tuple[float, ...]:
    """Where the commanded joints are commanded to be at the observation's time, in
    output order: ``followed`` (the gate's commanded motion, as the controller samples
    it: right after a start, on its way from the arm to the first point, never that
    point before it is reached), else the observation's measured state."""
    if followed is None:
        order = {name: i for i, name in enumerate(joint_names)}
        commanded = np.array([snapshot.state[order[j]] for j in settings.commanded_joints])
    else:
        commanded = followed.state(snapshot.t_obs)[0]
    return tuple(float(q) for q in commanded)


class Requester:
    """Requests a chunk when the scheduler wants one (or, timed to frames, when new
    frames came), from the inputs' newest frames and joint states; returns a hold
    when they are missing or stale.

    Args:
        settings: The settings the inputs are built for (cameras, joints, encoding).
        camera_keys: The camera map's keys, in map order.
        cameras: The camera map's entries; None: the keys only (RGB arrays).
        clock: Times each request (frame reads included in ``request_to_wire``).
        counts: ``requests``, and each refused frame or joint state message.
        submit: Hands an observation and its tag to the connection; False when it
            cannot take it now (not connected, a request in flight).
        timing: Which moment an observation shows (``observation_timing``).
        sources: Camera key -> where its newest frame is read; None: pushed frames.
        deserialize: For frames the CDR reader does not understand (rclpy's).
        warning: Writes a WARN line (a refused message, at most every 5 s).
        joint_states_topic: The joint states' resolved topic, named in every reason
            about them.

    Raises:
        ValueError: ``timing`` is not one of ``OBSERVATION_TIMINGS``.
    """

    def __init__(
        self,
        settings: StreamingSettings,
        camera_keys: Sequence[str],
        cameras: Sequence[CameraEntry] | None,
        *,
        clock: RequestClock,
        counts: StreamingCounts,
        submit: Callable[[dict[str, Any], RequestTag], bool],
        timing: ObservationTiming,
        sources: Mapping[str, FrameSource] | None,
        deserialize: Callable[[bytes], Any] | None,
        warning: Callable[[str], Any],
        joint_states_topic: str | None = None,
    ) -> None:
        if timing not in OBSERVATION_TIMINGS:
            raise ValueError(
                f"observation_timing {timing!r} is not one of {list(OBSERVATION_TIMINGS)}"
            )
        self._inputs = ObservationInputs.for_settings(
            settings,
            camera_keys,
            cameras,
            clock=clock,
            sources=sources,
            deserialize=deserialize,
            refused=self.input_refused,
            joint_states_topic=joint_states_topic,
        )
        self._clock = clock
        self._counts = counts
        self._submit = submit
        self._timing = timing
        self._warning = warning
        self._warned_at = -math.inf

    @property
    def inputs(self) -> ObservationInputs:
        """The cameras and joint states requests are taken from."""
        return self._inputs

    def input_refused(self, reason: str, now: float) -> None:
        """A frame or joint state message was refused: count it, WARN at most every
        :data:`INPUT_WARNING_PERIOD_S` (no hold: the previous one stays until stale)."""
        self._counts.refused(reason)
        if now - self._warned_at >= INPUT_WARNING_PERIOD_S:
            self._warned_at = now
            self._warning(reason)

    def _problem(self, problem: InputProblem, now: float) -> Hold | None:
        if problem.kind == "frame_conversion":
            # That camera falls back to its previous frame; the next tick tries again.
            self.input_refused(problem.reason, now)
            return None
        return Hold(problem.reason, problem.kind, refusal=problem.kind != "missing_input")

    def run(
        self,
        session: ServerSession,
        now: float,
        settings: StreamingSettings,
        *,
        prompt: str,
        session_id: str,
        followed: Callable[[], ControllerTrajectory | None],
    ) -> Hold | None:
        """Read the cameras if a request is near, then request if one is wanted; the
        hold (or a refused frame, counted) when the inputs do not give an observation.
        ``followed`` gives what the controllers follow (``Gate.followed``), read only
        for a request whose observation needs it (the action prefix, velocity actions)."""
        inputs = self._inputs
        scheduler = session.scheduler
        started = self._clock.perf_clock()
        stored_before = inputs.frames.stored
        if inputs.pulls_frames and frames_wanted(scheduler, now):
            inputs.read_sources(now, scheduler.next_request_time(), session.spec.image_size)
        timed_to_frames = self._timing == "frame_arrival"
        if not (
            scheduler.wants_request(now)
            or (timed_to_frames and frames_just_came(scheduler, inputs, now))
        ):
            return None
        snapshot = inputs.snapshot(
            now,
            session.spec.image_size,
            settings.sensor_timeout_s,
            timed_after=stored_before,
            at_frames=self._timing == "frame",
        )
        if isinstance(snapshot, InputProblem):
            return self._problem(snapshot, now)
        needs_followed = (
            session.reader.integrates or session.scheduler.config.smoothing.needs_prefix
        )
        commanded = followed() if needs_followed else None
        observation, committed = build_observation(
            session,
            snapshot,
            settings,
            prompt=prompt,
            session_id=session_id,
            joint_names=inputs.joints.joint_names,
            requested_at=now,
            followed=commanded,
        )
        start = self._clock.start(started, snapshot.frames.newest_prepared_s, now)
        origin = (
            commanded_origin(commanded, snapshot, settings, inputs.joints.joint_names)
            if session.reader.integrates
            else None
        )
        tag = RequestTag(
            session.generation, session.timeline, session_id, snapshot.t_obs, start, origin
        )
        if self._submit(observation, tag):
            scheduler.request_sent(snapshot.t_obs, committed_steps=committed)
            self._clock.sent(start, now)
            self._counts.requests += 1
        return None
