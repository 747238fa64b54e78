"""``policy_node --help``: how to start it, its topics and every parameter (from the table)."""

from __future__ import annotations

from relay_ros.node.node_main import UsageRow, format_usage
from relay_ros.node.params_doc import text_rows

__all__ = ["usage"]

_USAGE_TOPICS = (
    UsageRow("joint_states_topic", "in sensor_msgs/JointState", "the robot's joint states"),
    UsageRow(
        "camera_map's topics",
        "in sensor_msgs/Image or CompressedImage",
        "one per model camera key of the camera map (YAML, docs/node.md)",
    ),
    UsageRow("~/prompt", "in std_msgs/String", "replaces the prompt parameter"),
    UsageRow(
        "deadman_topic",
        "in std_msgs/Bool",
        "with deadman_topic set: commands only while true comes within deadman_timeout_s",
    ),
    UsageRow(
        "outputs.<name>.topic",
        "out trajectory_msgs/JointTrajectory",
        "one per trajectory controller (none in dry_run)",
    ),
    UsageRow("~/preview", "out trajectory_msgs/JointTrajectory", "every trajectory, dry run too"),
    UsageRow(
        "~/observation/<camera key>, ~/observation/state",
        "out Image, JointState",
        "each observation as the model receives it, while someone subscribes",
    ),
    UsageRow("/diagnostics", "out diagnostic_msgs/DiagnosticArray", "the node's health, 1 Hz"),
    UsageRow("~/reset", "service std_srvs/Trigger", "new session; the server resets its policy"),
    UsageRow("~/enable", "service std_srvs/SetBool", "start or stop commanding"),
    UsageRow(
        "~/change_state, ~/get_state, ...",
        "services lifecycle_msgs",
        "a managed node: ros2 lifecycle set <node> configure | activate | deactivate | "
        "cleanup | shutdown (autostart: configured and activated at start)",
    ),
)


def usage() -> str:
    """``policy_node --help``: topics, every parameter (from the table) and where to read more."""
    return format_usage(
        "policy_node",
        "Streams action chunks from a remote VLA policy server (pi0, pi0.5, GR00T) to "
        "ros2_control trajectory controllers: cameras and joint states in, one observation "
        "per request, trajectories out, holding position whenever an input or a reply is "
        "not safe to use.",
        topics=_USAGE_TOPICS,
        parameters=[UsageRow(name, facts, text) for name, facts, text in text_rows()],
        docs="docs/node.md (parameters, topics, safety), docs/streaming.md, docs/reliability.md",
        example="policy_node --ros-args --params-file config/pi05.yaml "
        "-p policy_url:=ws://127.0.0.1:8000/{model}",
    )
