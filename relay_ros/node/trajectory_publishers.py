"""policy_node's trajectory publishers: the core's messages as ``JointTrajectory``.

The streaming core hands over :class:`~relay_ros.pipeline.gate.messages.TrajectoryMessage`
values (plain arrays and exact ``(sec, nanosec)`` times); :func:`joint_trajectory`
turns one into the ROS message and :class:`TrajectoryPublishers` sends it to its
controller's topic or to ``~/preview``. A controller's publisher is created when first
used, so a node started in ``dry_run`` does not show up as a publisher on the
controllers' topics until ``dry_run`` is switched off. :meth:`TrajectoryPublishers.unheard`
names the controller topics nobody subscribes to (a stopped controller, a typo).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from builtin_interfaces.msg import Duration as DurationMsg
from builtin_interfaces.msg import Time as TimeMsg
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from relay_ros.node.qos import RELIABLE
from relay_ros.pipeline.gate.messages import TrajectoryMessage

__all__ = ["TrajectoryPublishers", "joint_trajectory", "unheard_problem"]


def joint_trajectory(message: TrajectoryMessage) -> JointTrajectory:
    """``message`` as a ``trajectory_msgs/JointTrajectory`` (positions, velocities and
    times copied exactly)."""
    points = message.points
    msg = JointTrajectory()
    msg.header.stamp = TimeMsg(sec=points.stamp_sec_nanosec[0], nanosec=points.stamp_sec_nanosec[1])
    msg.header.frame_id = message.frame_id
    msg.joint_names = list(message.joint_names)
    out = []
    for positions, velocities, (sec, nanosec) in zip(
        points.positions.tolist(),
        points.velocities.tolist(),
        points.time_from_start_sec_nanosec,
    ):
        point = JointTrajectoryPoint()
        point.positions = positions
        point.velocities = velocities
        point.time_from_start = DurationMsg(sec=sec, nanosec=nanosec)
        out.append(point)
    msg.points = out
    return msg


def unheard_problem(unheard: Sequence[tuple[str, str]]) -> str | None:
    """The ``/diagnostics`` sentence for controller topics nobody subscribes to
    (``(output name, topic)`` pairs), or None when every one has a subscriber."""
    if not unheard:
        return None
    topics = ", ".join(topic for _, topic in unheard)
    return (
        f"no controller subscribes to {topics}: is it running, and its topic spelt so? "
        "(trajectories sent there move nothing)"
    )


class TrajectoryPublishers:
    """One publisher per controller output (created on first use) and ``~/preview``.

    Args:
        node: The node that owns the publishers.
        topics: Output name -> its controller's trajectory topic.
        group: The callback group of the publishers (the node's polled group: their
            QoS event handlers stay out of the executor's wait set).
        create_now: Create every controller's publisher now (False in ``dry_run``).
    """

    def __init__(
        self,
        node: Node,
        topics: Mapping[str, str],
        *,
        group: CallbackGroup,
        create_now: bool,
    ) -> None:
        self._node = node
        self._topics = dict(topics)
        self._group = group
        self._publishers: dict[str, Any] = {}
        if create_now:
            for name in self._topics:
                self._output(name)
        self._preview = node.create_publisher(
            JointTrajectory, "~/preview", RELIABLE, callback_group=group
        )

    def _output(self, name: str) -> Any:
        publisher = self._publishers.get(name)
        if publisher is None:
            publisher = self._node.create_publisher(
                JointTrajectory, self._topics[name], RELIABLE, callback_group=self._group
            )
            self._publishers[name] = publisher
        return publisher

    def create_all(self) -> None:
        """Create every controller's publisher now (``dry_run`` switched off)."""
        for name in self._topics:
            self._output(name)

    def unheard(self) -> list[tuple[str, str]]:
        """(output name, resolved topic) of each controller publisher that exists and
        has no subscriber: a stopped controller, or a misspelt topic."""
        return [
            (name, publisher.topic_name)
            for name, publisher in self._publishers.items()
            if publisher.get_subscription_count() == 0
        ]

    def destroy(self) -> None:
        """Remove every publisher from the node."""
        for publisher in [*self._publishers.values(), self._preview]:
            self._node.destroy_publisher(publisher)
        self._publishers.clear()

    def publish(self, message: TrajectoryMessage) -> None:
        """Send ``message`` to its controller, or to ``~/preview`` (only while someone
        subscribes: it is for people and recorders)."""
        if message.output is None:
            if self._preview.get_subscription_count() == 0:
                return
            self._preview.publish(joint_trajectory(message))
        else:
            self._output(message.output).publish(joint_trajectory(message))
