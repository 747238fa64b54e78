"""Subscriptions the node reads when it needs a message, not on every message.

Three raw 640x480 cameras at 30 Hz and joint states at 100 Hz wake an rclpy executor
190 times a second; each wake-up (wait-set rebuild, take, Python callback) costs
more CPU than the node's own work, and the node only ever uses the newest frame of
each camera at request time (``bench/pipeline.py``). So the node keeps these
subscriptions out of the executor and takes their messages itself on its tick
(docs/architecture.md, "The tick"):

- :class:`PolledCallbackGroup`: an executor never waits on or runs anything of this
  group (rclpy's executors leave out of their wait set every entity whose group's
  ``can_execute`` is false). That includes the QoS event handlers of its
  subscriptions and publishers: an incompatible QoS is still logged by the other
  side (the camera driver, the controller, ``ros2 topic echo``). The node also puts
  its publishers in it: each QoS event handler in the wait set costs every executor
  wake-up about 40 us.
- :class:`PolledSubscription`: :meth:`~PolledSubscription.take` reads one queued
  message with its age, measured from when the middleware received it (the
  ``received_timestamp`` of the message info, system clock), so a frame that waited
  in the queue is as old as it really is for the staleness checks;
  :meth:`~PolledSubscription.take_newest` makes a camera subscription the streaming
  core's frame source (``relay_ros.pipeline.frame_source``).

With a history depth of 1, the queue holds only the newest message: everything the
node does not need is overwritten inside the middleware, never copied into Python.

The subscription keeps its callback: an executor that ignores callback groups (none
of rclpy's does) would push messages through it, and the node handles both paths
the same way.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.subscription import Subscription
from sensor_msgs.msg import CompressedImage, Image

from relay_ros.node.qos import camera_qos
from relay_ros.pipeline.camera_map import CameraEntry
from relay_ros.pipeline.frame_source import ArrivedFrame

__all__ = [
    "ClockRate",
    "PolledCallbackGroup",
    "PolledSubscription",
    "Taken",
    "camera_subscription",
    "message_age",
]


class PolledCallbackGroup(ReentrantCallbackGroup):
    """A callback group that no executor waits on or runs: its subscriptions are read
    with :meth:`PolledSubscription.take`, its publishers' QoS events are ignored."""

    def can_execute(self, entity: Any) -> bool:
        """Always False: the owner takes the messages itself."""
        return False


class ClockRate:
    """How fast the node clock runs against the system clock, to put a message's age
    (system clock, from the middleware) on the node clock.

    1 with the system clock; with ``use_sim_time``, a bag played at 2x or a simulator
    running faster or slower than real time make it something else (0 while paused).
    A frame that waited 0.25 s (system) in its queue at rate 2 is 0.5 s old on the
    node clock: taken as 0.25 s old it would look fresh past ``sensor_timeout_s``.
    The rate is measured over the last :data:`WINDOW_S` of ticks (:meth:`observe`),
    1 until 0.1 s of them are known and after :meth:`reset` or a jump of the node clock
    (back, or forward faster than :data:`MAX_RATE`: the first ``/clock`` message, from
    0 to the bag's time, is not announced as a jump).
    """

    #: Seconds (system clock) of ticks the rate is measured over.
    WINDOW_S = 1.0
    #: Faster than this many node seconds per system second is a jump, not a rate.
    MAX_RATE = 100.0

    def __init__(self) -> None:
        self._samples: deque[tuple[float, float]] = deque()  # (system s, node s)

    def observe(
        self, node_now: float, system_now: float | None = None, *, simulated: bool = True
    ) -> None:
        """The node clock reads ``node_now`` at ``system_now`` (default: now).

        ``simulated``: whether the node clock is a simulated one (``use_sim_time``);
        when it is not, it is the system clock and the rate is exactly 1 (two clock
        reads a preemption apart would make it seem otherwise on a loaded machine)."""
        if not simulated:
            self._samples.clear()
            return
        system = time.time() if system_now is None else system_now
        if self._samples:
            last_system, last_node = self._samples[-1]
            if node_now < last_node or node_now - last_node > self.MAX_RATE * max(
                system - last_system, 0.01
            ):
                self._samples.clear()  # the node clock jumped: measure afresh
        self._samples.append((system, node_now))
        while len(self._samples) > 2 and system - self._samples[1][0] >= self.WINDOW_S:
            self._samples.popleft()

    def rate(self) -> float:
        """Node seconds per system second (1 until known)."""
        if len(self._samples) < 2:
            return 1.0
        (s0, n0), (s1, n1) = self._samples[0], self._samples[-1]
        if s1 - s0 < 0.1 or n1 < n0:
            return 1.0
        return (n1 - n0) / (s1 - s0)

    def received(self, now: float, age_s: float) -> float:
        """When a message ``age_s`` (system seconds) old at node time ``now`` arrived,
        on the node clock."""
        return now - age_s * self.rate()

    def reset(self) -> None:
        """Forget the samples (the node clock jumped)."""
        self._samples.clear()


@dataclass(frozen=True)
class Taken:
    """One message taken from a :class:`PolledSubscription`.

    Attributes:
        msg: The message (``bytes`` for a raw subscription).
        age_s: Seconds since the middleware received it (>= 0; see
            :func:`message_age` for a middleware that gives no reception time).
    """

    msg: Any
    age_s: float


def message_age(now_ns: int, received_ns: int, seen_empty_ns: int) -> float:
    """Seconds since a message taken at ``now_ns`` was received (all system-clock ns).

    ``received_ns`` is the middleware's reception time, 0 when it gives none; then
    the message is taken to be as old as the last time the queue was found empty
    (``seen_empty_ns``), the earliest it can have arrived: a frame of a camera that
    died long ago is never mistaken for a fresh one.
    """
    since = received_ns if received_ns > 0 else seen_empty_ns
    return max(0.0, (now_ns - since) * 1e-9)


class PolledSubscription:
    """A subscription whose messages :meth:`take` reads on demand.

    Args:
        node: The node that owns the subscription.
        msg_type: The message class.
        topic: The topic name (resolved like any subscription's).
        qos: The QoS profile; its depth is how many messages wait between two takes.
        group: The node's :class:`PolledCallbackGroup`.
        callback: Handles a message pushed by an executor that runs the group anyway.
        raw: Take serialized messages (``bytes``) instead of message objects.
        clock_rate: Puts ages on the node clock for :meth:`take_newest` (None: the
            node clock runs with the system clock).
    """

    def __init__(
        self,
        node: Node,
        msg_type: Any,
        topic: str,
        qos: QoSProfile,
        *,
        group: PolledCallbackGroup,
        callback: Callable[[Any], None],
        raw: bool = False,
        clock_rate: ClockRate | None = None,
    ) -> None:
        if not isinstance(group, PolledCallbackGroup):
            raise TypeError(
                f"group must be a PolledCallbackGroup, not {type(group).__name__}: "
                "an executor would take the messages first"
            )
        self._subscription = node.create_subscription(
            msg_type, topic, callback, qos, callback_group=group, raw=raw
        )
        # A take loop stops after this many messages even if more keep arriving.
        self._max_batch = 2 * max(1, int(qos.depth))
        # System time when the queue was last found empty (or the subscription made):
        # a message without a reception time arrived after it.
        self._seen_empty_ns = time.time_ns()
        self._clock_rate = clock_rate

    @property
    def topic_name(self) -> str:
        """The fully resolved topic name."""
        return self._subscription.topic_name

    @property
    def subscription(self) -> Subscription:
        """The rclpy subscription (for its publisher count and QoS)."""
        return self._subscription

    def take(self) -> Taken | None:
        """The oldest queued message, or None when the queue is empty."""
        sub = self._subscription
        with sub.handle:
            taken = sub.handle.take_message(sub.msg_type, sub.raw)
        now_ns = time.time_ns()
        if taken is None:
            self._seen_empty_ns = now_ns
            return None
        msg, info = taken
        received_ns = int(info.get("received_timestamp", 0) or 0)
        return Taken(msg, message_age(now_ns, received_ns, self._seen_empty_ns))

    def take_all(self) -> list[Taken]:
        """The queued messages, oldest first (at most twice the QoS depth)."""
        out: list[Taken] = []
        while len(out) < self._max_batch and (taken := self.take()) is not None:
            out.append(taken)
        return out

    def take_newest(self, now: float) -> ArrivedFrame | None:
        """The newest queued message (older queued ones are dropped) with its reception
        time on the node clock (``now`` minus its age, at the clock's rate), or None: a
        camera's :class:`~relay_ros.pipeline.frame_source.FrameSource`."""
        batch = self.take_all()
        if not batch:
            return None
        rate = 1.0 if self._clock_rate is None else self._clock_rate.rate()
        return ArrivedFrame(batch[-1].msg, now - batch[-1].age_s * rate)


def camera_subscription(
    node: Node,
    entry: CameraEntry,
    *,
    group: PolledCallbackGroup,
    callback: Callable[[Any], None],
    clock_rate: ClockRate | None = None,
) -> PolledSubscription:
    """The polled subscription of one camera of the map: ``CompressedImage`` for the
    compressed transport, else ``Image`` read straight from its CDR bytes
    (:mod:`relay_ros.pipeline.image_cdr`: building the rclpy message would copy every
    900 KiB frame once more), with depth 1 (:func:`~relay_ros.node.qos.camera_qos`)."""
    compressed = entry.transport == "compressed"
    return PolledSubscription(
        node,
        CompressedImage if compressed else Image,
        entry.topic,
        camera_qos(entry),
        group=group,
        callback=callback,
        raw=not compressed,
        clock_rate=clock_rate,
    )
