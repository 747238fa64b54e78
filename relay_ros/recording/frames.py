"""What a recorded frame holds, taken causally from the inputs' recent history.

:class:`FrameAssembler` is the one place a frame's contents are chosen, for a live
recording (policy_node's recording tick) and for a bag export alike. It is fed the
inputs as they arrive, each with its arrival time (camera frames, joint states), and
:meth:`FrameAssembler.sample` gives the frame at a time ``t``:

- each camera's image: the newest frame that arrived at or before ``t``;
- the state: each state joint's newest position at or before ``t``, in the model's
  order;
- the action, in the model's action order: while the node commands the robot, the
  position the controllers were commanded to be at at ``t`` (given by the caller, in
  the commanded joints' order); otherwise (disabled, dry run, nothing sent yet) the
  commanded joints' measured positions at or before ``t``: what a human or another
  controller made the arm do; action dimensions that drive no joint are 0;
- ``intervention`` and the task, as the caller says.

Nothing from after ``t`` is used (causal alignment). A camera without a frame, a
joint without a position, or an input older than ``max_age_s`` at ``t`` gives a
:class:`Skip` with the reason instead: the frame is not recorded.

:class:`SharedFrameSource` lets the recorder read the node's camera subscriptions
without taking frames away from the streaming core: both see each frame once.

Plain Python, not thread-safe: the node's executor thread (or the exporter) owns it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay_ros.pipeline.frame_source import ArrivedFrame, FrameSource

__all__ = [
    "FrameAssembler",
    "FrameSample",
    "SharedFrameSource",
    "Skip",
]

# Frames kept per camera: the newest at or before t is among the last few.
_FRAMES_KEPT = 4
# Positions kept per joint (5 s at 100 Hz).
_POSITIONS_KEPT = 500


@dataclass(frozen=True, eq=False)
class FrameSample:
    """A frame's inputs as they arrived (images not yet converted).

    Attributes:
        time: The frame's time ``t`` (node clock, or bag time for an export).
        images: Camera key -> the message as it arrived (serialized ``Image``,
            ``CompressedImage``, or an RGB array).
        image_times: Camera key -> when that message arrived (<= ``time``).
        state: The state vector (float64).
        action: The action vector (float64).
        intervention: A human, not the policy, moved the robot.
        task: The prompt in force.
    """

    time: float
    images: Mapping[str, Any]
    image_times: Mapping[str, float]
    state: np.ndarray
    action: np.ndarray
    intervention: bool
    task: str


@dataclass(frozen=True)
class Skip:
    """No frame at this time, and why (a sentence naming the input)."""

    reason: str


class _Timeline:
    """One input's recent values with their arrival times, in arrival order."""

    def __init__(self, length: int) -> None:
        self._items: deque[tuple[float, Any]] = deque(maxlen=length)

    def add(self, t: float, value: Any) -> None:
        if self._items and t < self._items[-1][0]:
            return  # arrived out of order: an older value never replaces a newer one
        self._items.append((t, value))

    def at_or_before(self, t: float) -> tuple[float, Any] | None:
        for item in reversed(self._items):
            if item[0] <= t:
                return item
        return None

    def clear(self) -> None:
        self._items.clear()


class FrameAssembler:
    """The inputs' recent history and the frame at a given time (module docstring).

    Args:
        cameras: The camera keys, in map order.
        state_joints: The state vector's joints, in the model's order.
        action_joints: Per action dimension, the joint it drives (None: none).
        command_joints: The order of the commanded positions :meth:`sample` is given.
        max_age_s: The oldest an input may be at the frame's time (``sensor_timeout_s``).
    """

    def __init__(
        self,
        cameras: Sequence[str],
        state_joints: Sequence[str],
        action_joints: Sequence[str | None],
        command_joints: Sequence[str],
        max_age_s: float,
    ) -> None:
        self.cameras = tuple(cameras)
        self.state_joints = tuple(state_joints)
        self.action_joints = tuple(action_joints)
        missing = [j for j in self.action_joints if j is not None and j not in command_joints]
        if missing:
            raise ValueError(f"action joints {missing} are not among the commanded joints")
        self._command_index = [
            None if j is None else list(command_joints).index(j) for j in self.action_joints
        ]
        self._max_age = float(max_age_s)
        self._frames = {key: _Timeline(_FRAMES_KEPT) for key in self.cameras}
        watched = dict.fromkeys(list(self.state_joints) + [j for j in self.action_joints if j])
        self._joints = {name: _Timeline(_POSITIONS_KEPT) for name in watched}

    def frame(self, key: str, msg: Any, received: float) -> None:
        """Camera ``key``'s frame ``msg`` arrived at ``received``."""
        self._frames[key].add(float(received), msg)

    def joint_state(
        self, names: Sequence[str], positions: Sequence[float], received: float
    ) -> None:
        """One ``JointState`` message's positions, arrived at ``received``; joints not
        watched are ignored, a message with mismatched lengths is ignored whole."""
        if len(names) != len(positions):
            return
        for name, position in zip(names, positions):
            timeline = self._joints.get(name)
            if timeline is not None:
                timeline.add(float(received), float(position))

    def clear(self) -> None:
        """Forget every input (the node clock jumped: their times are on the old timeline)."""
        for timeline in (*self._frames.values(), *self._joints.values()):
            timeline.clear()

    def _position(self, name: str, t: float) -> float | Skip:
        found = self._joints[name].at_or_before(t)
        if found is None:
            return Skip(f"no joint state of {name!r} yet")
        stamp, value = found
        if t - stamp > self._max_age:
            return Skip(f"joint {name!r} is stale ({t - stamp:.3f} s old)")
        if not math.isfinite(value):
            return Skip(f"joint {name!r} is {value}")
        return float(value)

    def sample(
        self,
        t: float,
        *,
        commanded: np.ndarray | None,
        intervention: bool,
        task: str,
    ) -> FrameSample | Skip:
        """The frame at ``t`` (see the module docstring).

        Args:
            t: The frame's time.
            commanded: The commanded positions at ``t`` (``command_joints`` order)
                while the node commands the robot, else None (measured positions).
            intervention: A human, not the policy, moves the robot.
            task: The prompt in force.
        """
        images: dict[str, Any] = {}
        image_times: dict[str, float] = {}
        for key in self.cameras:
            found = self._frames[key].at_or_before(t)
            if found is None:
                return Skip(f"no frame from camera {key!r} yet")
            received, msg = found
            if t - received > self._max_age:
                return Skip(f"camera {key!r} is stale ({t - received:.3f} s old)")
            images[key] = msg
            image_times[key] = received
        state = np.empty(len(self.state_joints))
        for i, name in enumerate(self.state_joints):
            value = self._position(name, t)
            if isinstance(value, Skip):
                return value
            state[i] = value
        action = np.zeros(len(self.action_joints))
        for d, (joint, index) in enumerate(zip(self.action_joints, self._command_index)):
            if joint is None:
                continue
            if commanded is not None and index is not None:
                action[d] = float(commanded[index])
                continue
            value = self._position(joint, t)
            if isinstance(value, Skip):
                return value
            action[d] = value
        if not np.isfinite(action).all():
            return Skip(f"commanded position is not finite: {action.tolist()}")
        return FrameSample(t, images, image_times, state, action, bool(intervention), task)


class SharedFrameSource:
    """One camera's :class:`~relay_ros.pipeline.frame_source.FrameSource`, read by the
    streaming core (:meth:`take_newest`) and the recorder (:meth:`take_for_recording`):
    whoever reads first takes the frame from the source, and each reader gets every
    new frame once, as if it read the source alone."""

    def __init__(self, source: FrameSource) -> None:
        self._source = source
        self._latest: ArrivedFrame | None = None
        self._core_has = True
        self._recorder_has = True

    def _pull(self, now: float) -> None:
        frame = self._source.take_newest(now)
        if frame is not None:
            self._latest = frame
            self._core_has = self._recorder_has = False

    def take_newest(self, now: float) -> ArrivedFrame | None:
        """The core's read: the newest frame it has not had yet, or None."""
        self._pull(now)
        if self._core_has:
            return None
        self._core_has = True
        return self._latest

    def take_for_recording(self, now: float, *, pull: bool = True) -> ArrivedFrame | None:
        """The recorder's read: the newest frame it has not had yet, or None.
        ``pull=False``: only a frame the core has taken from the source already (the
        source is not read: its copy out of the middleware costs the caller's thread)."""
        if pull:
            self._pull(now)
        if self._recorder_has:
            return None
        self._recorder_has = True
        return self._latest
