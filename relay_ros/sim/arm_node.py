"""``sim_arm``: a simulated arm that stands in for ros2_control on a laptop.

One `TrajectoryFollower` per configured controller behaves like a
``joint_trajectory_controller`` on that controller's ``joint_trajectory`` topic; the
node publishes every joint on ``/joint_states`` at 100 Hz and the streaming measures
(stall time, boundary step, action age, rejections) on ``~/metrics``. The followers
are exposed for in-process use (the demo and tests can read their metrics and
history directly). All logic lives in `relay_ros.sim.trajectory_follower` and the modules it uses.

Parameters (declared in `SimArmNode._declare_parameters`; see docs/simulation.md):

- ``controller_names`` (string[]): controller names, default
  ``["arm_controller", "gripper_controller"]`` (not ``controllers``: a list named like
  the ``controllers.<name>.*`` namespace breaks ``ros2 param dump``).
- ``controllers.<name>.joints`` (string[]): the controller's joints (defaults exist
  only for the two default controllers).
- ``controllers.<name>.topic`` (string): default ``<name>/joint_trajectory``.
- ``controllers.<name>.initial_positions`` (double[]): default all zeros.
- ``controllers.<name>.allow_partial_joints_goal`` (bool): default false.
- ``controllers.<name>.allow_nonzero_velocity_at_trajectory_end`` (bool): default
  false (Jazzy).
- ``controllers.<name>.interpolate_from_desired_state`` (bool): default true (a new
  trajectory starts from the last command; false: from the measured state, JTC's
  default), and ``controllers.<name>.allow_trajectory_replacement`` (bool): default
  false (true: the 2026 splice into the running trajectory); see
  `relay_ros.sim.trajectory_follower`.
- ``joint_states_topic`` (string), ``joint_states_rate_hz`` (double, 100),
  ``metrics_rate_hz`` (double, 1; 0 disables), ``tracking_time_constant_s``
  (double, default 0.04: the arm trails its command by a first-order lag; 0 =
  perfect tracking), ``history_length`` (int).
- ``robot_description_file`` (string, default the package's ``config/sim_arm.urdf``)
  published on ``robot_description_topic`` (default ``robot_description``,
  transient-local, as robot_state_publisher does): policy_node reads its limits there.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.context import Context
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from relay_ros.node.node_main import (
    NodeProgram,
    UsageRow,
    default_row,
    format_usage,
    run_node,
    typed_row,
)
from relay_ros.paths import config_file
from relay_ros.pipeline.urdf_limits import UrdfError, load_urdf_file
from relay_ros.sim._parameters import (
    as_parameters,
    declare_if_given,
    parameter_types,
    refuse_renamed,
)
from relay_ros.sim.controller_measures import FollowerMetrics
from relay_ros.sim.trajectory_command import TrajectoryCommand
from relay_ros.sim.trajectory_follower import DEFAULT_TRACKING_LAG_S, TrajectoryFollower
from relay_ros.stop_signals import take_stop_signals

__all__ = ["DEFAULT_CONTROLLERS", "SimArmConfigError", "SimArmNode", "main"]

#: Joints of the default controllers: a 7-joint arm and a one-joint gripper.
DEFAULT_CONTROLLERS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "arm_controller": tuple(f"joint{i}" for i in range(1, 8)),
        "gripper_controller": ("gripper_joint",),
    }
)

# Node-wide parameters: name -> (default, description).
_NODE_PARAMETERS: dict[str, tuple[Any, str]] = {
    "controller_names": (
        list(DEFAULT_CONTROLLERS),
        "Names of the simulated joint_trajectory_controllers; each has controllers.<name>.* "
        "parameters.",
    ),
    "joint_states_topic": (
        "joint_states",
        "Topic of the sensor_msgs/JointState output (relative: follows the node's namespace).",
    ),
    "joint_states_rate_hz": (100.0, "Rate of control cycles and /joint_states messages, Hz."),
    "metrics_rate_hz": (
        1.0,
        "Rate of the diagnostic_msgs/DiagnosticArray on ~/metrics, Hz (0 disables).",
    ),
    "tracking_time_constant_s": (
        DEFAULT_TRACKING_LAG_S,
        "The joints trail the command through a first-order lag with this time constant, "
        "seconds (a position-controlled arm: a few tens of ms); 0: they follow it exactly.",
    ),
    "history_length": (
        60_000,
        "Control cycles kept per controller for plotting (oldest dropped first).",
    ),
    "robot_description_file": (
        "",
        "URDF of the simulated arm, published on robot_description_topic; empty: the "
        "package's config/sim_arm.urdf (the limits config/*.yaml give).",
    ),
    "robot_description_topic": (
        "robot_description",
        "std_msgs/String topic the URDF is published on, transient-local as "
        "robot_state_publisher does (relative: follows the namespace); empty: not published.",
    ),
}

# robot_state_publisher's QoS for robot_description: kept for subscribers that come later.
_LATCHED = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

# Per-controller parameters under controllers.<name>.: suffix -> (type, description).
_CONTROLLER_PARAMETERS: dict[str, tuple[Parameter.Type, str]] = {
    "joints": (
        Parameter.Type.STRING_ARRAY,
        "Joints of this controller, in command order (required unless the controller is "
        "one of the defaults).",
    ),
    "topic": (
        Parameter.Type.STRING,
        "JointTrajectory input topic; default <name>/joint_trajectory (relative: follows "
        "the node's namespace).",
    ),
    "initial_positions": (
        Parameter.Type.DOUBLE_ARRAY,
        "Start position per joint, rad or m; default all zeros.",
    ),
    "allow_partial_joints_goal": (
        Parameter.Type.BOOL,
        "Accept trajectories for a subset of the joints (others hold); default false.",
    ),
    "allow_nonzero_velocity_at_trajectory_end": (
        Parameter.Type.BOOL,
        "Accept a non-zero velocity on the last point; default false (Jazzy; Humble: true).",
    ),
    "interpolate_from_desired_state": (
        Parameter.Type.BOOL,
        "A new trajectory starts from the last command (true, the default here; Humble: "
        "open_loop_control) or from the measured state (false, joint_trajectory_controller's "
        "default).",
    ),
    "allow_trajectory_replacement": (
        Parameter.Type.BOOL,
        "Splice a new trajectory into the running one as ros2_controllers 2026 does "
        "(its default there: true); default false here (Humble and Jazzy replace it).",
    ),
}

# joint_trajectory_controller subscribes with the system default QoS (reliable,
# volatile); a depth of 10 keeps every message so that every rejection is counted.
_TRAJECTORY_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
)
_JOINT_STATES_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
)


class SimArmConfigError(ValueError):
    """The sim_arm parameters are inconsistent."""


class SimArmNode(Node):
    """The ``sim_arm`` node: simulated joint_trajectory_controllers and /joint_states.

    Args:
        node_name: ROS node name.
        namespace: ROS namespace (None = the default).
        context: rclpy context (None = the global one).
        parameter_overrides: Parameter values, as ``{name: value}`` or a list of
            `rclpy.parameter.Parameter` (use the latter for empty arrays, whose type
            cannot be inferred).
        cli_args: ROS arguments of this node only (e.g. ``--ros-args --params-file F``).

    Raises:
        SimArmConfigError: No controllers, a controller without joints, a joint in two
            controllers, wrong initial position counts, or a non-positive rate.
    """

    def __init__(
        self,
        *,
        node_name: str = "sim_arm",
        namespace: str | None = None,
        context: Context | None = None,
        parameter_overrides: Mapping[str, Any] | Sequence[Parameter] | None = None,
        cli_args: Sequence[str] | None = None,
    ) -> None:
        super().__init__(
            node_name,
            namespace=namespace,
            context=context,
            parameter_overrides=as_parameters(parameter_overrides),
            cli_args=None if cli_args is None else list(cli_args),
        )
        try:
            self._setup()
        except Exception:
            # A half-built node would keep its handles until the context shuts down.
            self.destroy_node()
            raise

    # ------------------------------------------------------------------ public API

    @property
    def followers(self) -> Mapping[str, TrajectoryFollower]:
        """The follower of each controller, by controller name (read-only mapping)."""
        return MappingProxyType(self._followers)

    @property
    def topics(self) -> Mapping[str, str]:
        """The JointTrajectory input topic of each controller (fully resolved)."""
        return MappingProxyType(self._topics)

    @property
    def joint_names(self) -> list[str]:
        """All joints in /joint_states order (controllers in configured order)."""
        return list(self._joint_names)

    def metrics(self) -> dict[str, FollowerMetrics]:
        """Return the measures of every controller, by controller name."""
        return {name: f.measures.metrics() for name, f in self._followers.items()}

    def publish_metrics(self) -> None:
        """Publish the measures on ``~/metrics`` as one DiagnosticStatus per controller.

        Each status has ``name`` ``"<node name>: <controller>"``, level WARN while the
        controller holds after a stall or once it has rejected a message, else OK, and one
        KeyValue per `FollowerMetrics` field (``rejection_reasons`` as JSON, None as "").
        """
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        for name, metrics in self.metrics().items():
            status = DiagnosticStatus()
            status.name = f"{self.get_name()}: {name}"
            status.hardware_id = self.get_name()
            stalled = metrics.holding and metrics.stall_time_s > 0.0
            warn = stalled or metrics.rejected > 0
            status.level = DiagnosticStatus.WARN if warn else DiagnosticStatus.OK
            parts = ["holding" if metrics.holding else "following"]
            if metrics.rejected:
                parts.append(f"{metrics.rejected} rejected, last: {metrics.last_rejection}")
            status.message = "; ".join(parts)
            for key, value in metrics.to_dict().items():
                if isinstance(value, dict):
                    text = json.dumps(value, sort_keys=True)
                elif value is None:
                    text = ""
                else:
                    text = str(value)
                status.values.append(KeyValue(key=key, value=text))
            array.status.append(status)
        self._metrics_pub.publish(array)

    # ------------------------------------------------------------------ internals

    def _setup(self) -> None:
        """Declare parameters, build the followers and wire topics and timers."""
        config = self._declare_parameters()
        self._followers: dict[str, TrajectoryFollower] = {}
        self._topics: dict[str, str] = {}
        seen: dict[str, str] = {}
        for name, settings in config["controllers"].items():
            for joint in settings["joints"]:
                if joint in seen:
                    raise SimArmConfigError(
                        f"joint {joint!r} is in controllers {seen[joint]!r} and {name!r}; "
                        "expected each joint in one controller"
                    )
                seen[joint] = name
            try:
                follower = TrajectoryFollower(
                    settings["joints"],
                    settings["initial_positions"],
                    name=name,
                    allow_partial_joints=settings["allow_partial_joints_goal"],
                    allow_nonzero_velocity_at_end=settings[
                        "allow_nonzero_velocity_at_trajectory_end"
                    ],
                    tracking_time_constant_s=config["tracking_time_constant_s"],
                    interpolate_from_desired_state=settings["interpolate_from_desired_state"],
                    allow_trajectory_replacement=settings["allow_trajectory_replacement"],
                    history_length=config["history_length"],
                    log_rejections=False,
                )
            except ValueError as exc:
                raise SimArmConfigError(str(exc)) from exc
            self._followers[name] = follower
            self._topics[name] = settings["topic"]
        self._joint_names = [j for f in self._followers.values() for j in f.joint_names]

        for name, topic in self._topics.items():
            self.create_subscription(
                JointTrajectory,
                topic,
                functools.partial(self._on_trajectory, name),
                _TRAJECTORY_QOS,
            )
        self._joint_states_pub = self.create_publisher(
            JointState, config["joint_states_topic"], _JOINT_STATES_QOS
        )
        self._metrics_pub = self.create_publisher(DiagnosticArray, "~/metrics", 10)
        self._publish_description(config)
        self.create_timer(1.0 / config["joint_states_rate_hz"], self._on_control_cycle)
        if config["metrics_rate_hz"] > 0.0:
            self.create_timer(1.0 / config["metrics_rate_hz"], self.publish_metrics)
        self.get_logger().info(
            "simulating "
            + ", ".join(
                f"{name} ({len(f.joint_names)} joints on {self._topics[name]})"
                for name, f in self._followers.items()
            )
            + f"; joint states on {self._joint_states_pub.topic_name} at "
            f"{config['joint_states_rate_hz']:g} Hz; tracking lag "
            f"{1000.0 * config['tracking_time_constant_s']:g} ms"
        )

    def _publish_description(self, config: Mapping[str, Any]) -> None:
        """The arm's URDF on robot_description (transient-local), as robot_state_publisher."""
        topic = str(config["robot_description_topic"]).strip()
        if not topic:
            return
        path = str(config["robot_description_file"]) or str(config_file("sim_arm.urdf"))
        try:
            robot = load_urdf_file(path)
            text = open(path, encoding="utf-8").read()
        except (UrdfError, OSError, UnicodeDecodeError) as exc:
            raise SimArmConfigError(f"parameter 'robot_description_file': {exc}") from None
        self._description_pub = self.create_publisher(String, topic, _LATCHED)
        self._description_pub.publish(String(data=text))
        self.get_logger().info(
            f"robot '{robot.name}' ({len(robot.joints)} joints) on "
            f"{self._description_pub.topic_name}"
        )

    def _declare_parameters(self) -> dict[str, Any]:
        """Declare every parameter (with descriptions) and return the validated values."""
        refuse_renamed(self, "controllers", "controller_names", SimArmConfigError)
        values: dict[str, Any] = {}
        for name, (default, description) in _NODE_PARAMETERS.items():
            values[name] = self.declare_parameter(
                name, default, ParameterDescriptor(description=description)
            ).value
        names = [str(n) for n in values.pop("controller_names")]
        if not names:
            raise SimArmConfigError(
                "parameter 'controller_names' is empty; expected at least one name"
            )
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise SimArmConfigError(
                f"parameter 'controller_names' lists {duplicates} more than once; "
                "expected unique names"
            )
        for key in ("joint_states_rate_hz",):
            if not values[key] > 0.0:
                raise SimArmConfigError(f"parameter {key!r} is {values[key]!r}; expected > 0 Hz")
        if not values["metrics_rate_hz"] >= 0.0:
            raise SimArmConfigError(
                f"parameter 'metrics_rate_hz' is {values['metrics_rate_hz']!r}; expected >= 0 Hz"
            )

        controllers: dict[str, dict[str, Any]] = {}
        for controller in names:
            settings: dict[str, Any] = {}
            for suffix, (kind, description) in _CONTROLLER_PARAMETERS.items():
                full = f"controllers.{controller}.{suffix}"
                settings[suffix] = declare_if_given(self, full, kind, description)
            joints = list(settings["joints"] or DEFAULT_CONTROLLERS.get(controller, ()))
            if not joints:
                raise SimArmConfigError(
                    f"parameter 'controllers.{controller}.joints' is not set; expected the "
                    f"joint names of controller {controller!r}"
                )
            initial = settings["initial_positions"]
            initial = [0.0] * len(joints) if initial is None or len(initial) == 0 else initial
            if len(initial) != len(joints):
                raise SimArmConfigError(
                    f"parameter 'controllers.{controller}.initial_positions' has "
                    f"{len(initial)} values for {len(joints)} joints {joints}; "
                    f"expected {len(joints)}"
                )
            topic = settings["topic"] or f"{controller}/joint_trajectory"
            controllers[controller] = {
                "joints": joints,
                "initial_positions": [float(v) for v in initial],
                "topic": self.resolve_topic_name(topic),
                "allow_partial_joints_goal": bool(settings["allow_partial_joints_goal"]),
                "allow_nonzero_velocity_at_trajectory_end": bool(
                    settings["allow_nonzero_velocity_at_trajectory_end"]
                ),
                "interpolate_from_desired_state": settings["interpolate_from_desired_state"]
                is not False,
                "allow_trajectory_replacement": bool(settings["allow_trajectory_replacement"]),
            }
        values["controllers"] = controllers
        return values

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_trajectory(self, controller: str, msg: JointTrajectory) -> None:
        result = self._followers[controller].receive(TrajectoryCommand.from_msg(msg), self._now())
        if not result:
            self.get_logger().error(
                f"rejected a trajectory on {self._topics[controller]}: {result.reason}"
            )

    def _on_control_cycle(self) -> None:
        stamp = self.get_clock().now()
        if stamp.nanoseconds == 0:
            return  # use_sim_time and no /clock yet: there is no "now" to follow
        now = stamp.nanoseconds * 1e-9
        msg = JointState()
        msg.header.stamp = stamp.to_msg()
        msg.name = list(self._joint_names)
        positions: list[float] = []
        velocities: list[float] = []
        for follower in self._followers.values():
            sample = follower.update(now)
            positions.extend(float(v) for v in sample.positions)
            velocities.extend(float(v) for v in sample.velocities)
        msg.position = positions
        msg.velocity = velocities
        self._joint_states_pub.publish(msg)


def usage() -> str:
    """``sim_arm --help``: its topics and every parameter, from the tables above."""
    return format_usage(
        "sim_arm",
        "A simulated arm standing in for ros2_control: one joint_trajectory_controller "
        "per configured controller (same acceptance rules, replace on arrival, linear or "
        "cubic segments, hold), every joint on the joint-states topic and the streaming "
        "measures on ~/metrics.",
        topics=(
            UsageRow(
                "controllers.<name>.topic",
                "in trajectory_msgs/JointTrajectory",
                "default <name>/joint_trajectory",
            ),
            UsageRow("joint_states_topic", "out sensor_msgs/JointState", "every joint, each cycle"),
            UsageRow(
                "~/metrics",
                "out diagnostic_msgs/DiagnosticArray",
                "stall time, boundary step, action age, rejections per controller",
            ),
        ),
        parameters=[
            *(
                default_row(name, default, text)
                for name, (default, text) in _NODE_PARAMETERS.items()
            ),
            *(
                typed_row(f"controllers.<name>.{suffix}", kind, text)
                for suffix, (kind, text) in _CONTROLLER_PARAMETERS.items()
            ),
        ],
        docs="docs/simulation.md",
        example="sim_arm --ros-args -r __ns:=/robot1 "
        "-p controller_names:=[arm_controller] -p controllers.arm_controller.joints:=[j1,j2]",
    )


def main(args: list[str] | None = None) -> int:
    """Console entry point ``sim_arm``: spin the node until SIGINT or SIGTERM; the exit code."""
    return run_node(
        NodeProgram(
            "sim_arm",
            SimArmNode,
            usage,
            config_errors=(SimArmConfigError,),
            parameter_type=parameter_types(_NODE_PARAMETERS, "controllers", _CONTROLLER_PARAMETERS),
        ),
        args,
    )


if __name__ == "__main__":
    take_stop_signals()
    sys.exit(main())
