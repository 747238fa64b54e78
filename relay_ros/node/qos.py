"""The QoS profiles of policy_node's topics, each with the reason for its settings.

One place for them, so the publishers (controllers, ``~/preview``,
``/diagnostics``) and the subscriptions (cameras, joint states, prompt,
``robot_description``) of the node's modules agree.
"""

from __future__ import annotations

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

from relay_ros.pipeline.camera_map import CameraEntry

__all__ = ["DEADMAN", "JOINT_STATES", "LATCHED", "RELIABLE", "camera_qos"]

#: Trajectories, diagnostics, the prompt: every message matters, a short queue.
RELIABLE = QoSProfile(
    depth=10, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE
)
#: robot_state_publisher's robot_description: the last message kept for late joiners.
LATCHED = QoSProfile(
    depth=1,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
#: Joint states wait for the next tick: 100 of them cover 1 kHz over the longest gap
#: between ticks (several publishers may share the topic, each with some of the joints).
JOINT_STATES = QoSProfile(
    depth=100, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE
)

#: The dead-man switch: best effort matches a reliable publisher and a best-effort one
#: (a joystick driver's sensor-data profile); only the newest message matters.
DEADMAN = QoSProfile(
    depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT
)


def camera_qos(entry: CameraEntry) -> QoSProfile:
    """The subscription profile of one camera: its map entry's reliability and
    durability (``sensor_data`` or reliable), with depth 1, so older frames are
    overwritten in the middleware, never copied into Python."""
    base = qos_profile_sensor_data if entry.qos == "sensor_data" else RELIABLE
    return QoSProfile(
        depth=1,
        history=HistoryPolicy.KEEP_LAST,
        reliability=base.reliability,
        durability=base.durability,
    )
