"""policy_node: cameras and joint states in, action chunks out to ros2_control.

A managed (lifecycle) node, as ROS users drive robots' nodes (Nav2,
ros2_control): ``ros2 lifecycle set /policy_node configure | activate |
deactivate | cleanup | shutdown``, or ``autostart`` (default true) to configure
and activate it at start. What each state means:

- **unconfigured**: no parameters read, no connection. ``/diagnostics`` says so
  (ERROR with the reason after a failed configure, until a configure succeeds);
  ``~/enable`` is remembered, ``~/reset`` has nothing to reset.
- **configure**: read and validate every parameter (the table, the joint limits,
  the layout against the model's known dimensions) and the camera map, then create
  the connection (it connects and reconnects in the background), the streaming
  core, the subscriptions and the tick (:class:`~relay_ros.node.policy_wiring.PolicyWiring`).
  A mistake returns FAILURE with the reason in the log and on ``/diagnostics``;
  nothing is left behind.
- **inactive**: connected and reading its inputs, never commanding: no request, no
  trajectory. ``~/reset`` starts a new episode; ``~/enable`` sets the operator's switch.
- **activate**: command (unless ``~/enable`` false or the dead-man switch stops it).
- **deactivate**: a hold through the streaming core's one checked hold (the
  controllers get the commanded position, once, if a trajectory of ours moves the
  robot), then nothing.
- **cleanup**: close the connection (worker joined, socket closed) and remove every
  subscription, publisher and timer of the configuration; **shutdown**: the same,
  after a hold when active; the node does it when destroyed.

``~/enable`` is the operator's switch beside the lifecycle: its value outlives
every transition (a node disabled stays disabled through deactivate, cleanup and
configure until ``~/enable true``), and the robot is commanded only while the node
is active, enabled and (with ``deadman_topic``) the dead-man switch is held
(:mod:`relay_ros.pipeline.command_switches`).

``/diagnostics`` (1 Hz, in every state) carries ``lifecycle_state`` and the last
failed transition besides the streaming core's health, which ``relay-ros status``
shows. Threading: every timer, service and callback of the node is in its default
MutuallyExclusiveCallbackGroup (the lifecycle services too), so transitions never
run beside a tick; ``main()`` spins a SingleThreadedExecutor (rclpy 7.1's
MultiThreadedExecutor can skip timer periods for 0.3-1 s at a time with this node
and a 30 Hz publisher in one process, which would stall the robot).
"""

from __future__ import annotations

import gc
import sys
import traceback
from typing import TYPE_CHECKING, Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.exceptions import (
    InvalidHandle,
    InvalidParameterTypeException,
    InvalidParameterValueException,
)
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_srvs.srv import SetBool, Trigger

from relay_ros.node.diagnostics_message import diagnostic_array, diagnostic_status
from relay_ros.node.node_config import NodeConfig
from relay_ros.node.node_main import NodeProgram, run_node
from relay_ros.node.param_spec import ParameterError
from relay_ros.node.params import expected_value
from relay_ros.node.policy_usage import usage
from relay_ros.node.policy_wiring import PolicyWiring
from relay_ros.node.polled import PolledCallbackGroup
from relay_ros.node.qos import RELIABLE
from relay_ros.node.ros_params import declare_parameter
from relay_ros.pipeline.camera_map import CameraMapError
from relay_ros.pipeline.health import Health, Level
from relay_ros.pipeline.stats import LatencyStats
from relay_ros.pipeline.streaming import StreamingCore
from relay_ros.stop_signals import take_stop_signals
from relay_ros.wire.connection import PolicyConnection

if TYPE_CHECKING:
    from relay_ros.node.episode_recording import EpisodeRecording

__all__ = ["CONFIG_ERRORS", "PolicyNode", "freeze_startup_heap", "main"]

#: Exceptions that mean a configuration mistake (a FAILURE of configure, not a bug).
CONFIG_ERRORS: tuple[type[Exception], ...] = (
    ParameterError,
    CameraMapError,
    InvalidParameterTypeException,
    InvalidParameterValueException,
)

_SUCCESS = TransitionCallbackReturn.SUCCESS
_FAILURE = TransitionCallbackReturn.FAILURE
_ERROR = TransitionCallbackReturn.ERROR


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class PolicyNode(LifecycleNode):
    """The managed policy_node (module docstring); ``autostart`` configures and
    activates it before the constructor returns.

    Raises:
        ParameterError, CameraMapError (and rclpy's parameter exceptions): with
            ``autostart``, the configuration is wrong; the node is destroyed again.
    """

    def __init__(self, node_name: str = "policy_node", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._wiring: PolicyWiring | None = None
        # The last configuration, kept after cleanup so reports can read its counts.
        self._last_wiring: PolicyWiring | None = None
        self._enabled = True  # the operator's ~/enable, kept across transitions
        self._failure: BaseException | None = None  # why the last transition failed
        self._failure_text = ""
        self._autostarting = False
        try:
            self._autostart = bool(declare_parameter(self, "autostart"))
            group = self.default_callback_group
            # Its QoS events stay out of the executor's wait set (node.polled).
            self._diagnostics = self.create_publisher(
                DiagnosticArray, "/diagnostics", RELIABLE, callback_group=PolledCallbackGroup()
            )
            self.create_timer(1.0, self._publish_diagnostics, callback_group=group)
            self.create_service(Trigger, "~/reset", self._on_reset, callback_group=group)
            self.create_service(SetBool, "~/enable", self._on_enable, callback_group=group)
            if self._autostart:
                self._start()
            else:
                self.get_logger().info(
                    f"unconfigured (autostart false): 'ros2 lifecycle set "
                    f"{self.get_fully_qualified_name()} configure', then 'activate'"
                )
        except BaseException:
            # A configuration error must not leave a half-built node in the graph.
            self._close_wiring()
            super().destroy_node()
            raise

    def _start(self) -> None:
        """``autostart``: configure, then activate; a failure raises its error (the
        program then says it in one FATAL line, as for any configuration mistake)."""
        self._autostarting = True
        try:
            for trigger in (self.trigger_configure, self.trigger_activate):
                if trigger() != _SUCCESS:
                    raise self._failure or RuntimeError(self._failure_text)
        finally:
            self._autostarting = False

    # ------------------------------------------------------------------ lifecycle
    @property
    def lifecycle_state(self) -> str:
        """The lifecycle state's label: ``unconfigured``, ``inactive``, ``active``,
        ``finalized`` (or a transition's, e.g. ``configuring``, while it runs)."""
        return str(self._state_machine.current_state[1])

    def _failed(
        self, transition: str, exc: BaseException, back_to: str
    ) -> TransitionCallbackReturn:
        """Keep and say why ``transition`` failed (the node goes ``back_to`` that
        state): FAILURE for a configuration mistake, ERROR (with the traceback in the
        log) for anything else."""
        self._failure = exc
        self._failure_text = f"{transition} failed: {type(exc).__name__}: {_one_line(exc)}"
        mistake = isinstance(exc, CONFIG_ERRORS)
        if not self._autostarting:  # autostart: the program says it once, as FATAL
            if mistake:
                self.get_logger().error(self._failure_text)
            else:
                self.get_logger().error(f"{self._failure_text}\n{traceback.format_exc()}")
        self._publish_diagnostics(back_to)
        return _FAILURE if mistake else _ERROR

    def _succeeded(self, message: str, goal: str) -> TransitionCallbackReturn:
        """A transition to state ``goal`` succeeded: said in the log and at once on
        ``/diagnostics`` (as the state it ends in)."""
        self._failure = None
        self._failure_text = ""
        self.get_logger().info(message)
        self._publish_diagnostics(goal)
        return _SUCCESS

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Read and check every parameter and the camera map, connect (module docstring)."""
        try:
            self._wiring = PolicyWiring(
                self, enabled=self._enabled, on_health_change=self._publish_diagnostics
            )
            self._last_wiring = self._wiring
        except Exception as exc:  # a FAILURE or ERROR with the reason, never a crash
            return self._failed("configure", exc, "unconfigured")
        return self._succeeded("configured: inactive until activated", "inactive")

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Command (unless ``~/enable`` false or the dead-man switch stops it)."""
        try:
            self._configured().activate()
        except Exception as exc:
            return self._failed("activate", exc, "inactive")
        return self._succeeded("activated: commanding", "active")

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Hold through the core, then command nothing."""
        try:
            self._configured().deactivate()
        except Exception as exc:
            return self._failed("deactivate", exc, "active")
        return self._succeeded("deactivated: holding, no commands until activated", "inactive")

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Close the connection and remove the configuration's entities."""
        self._close_wiring()
        return self._succeeded("cleaned up: unconfigured", "unconfigured")

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """From any state: a hold first when active, then close."""
        try:
            if state.label == "active" and self._wiring is not None:
                self._wiring.deactivate(because="shutdown")
        except Exception as exc:
            self._close_wiring()
            return self._failed("shutdown", exc, "finalized")
        self._close_wiring()
        return self._succeeded("shut down", "finalized")

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """After an ERROR of a transition: close everything, back to unconfigured."""
        self._close_wiring()
        self.get_logger().error(f"closed after an error ({self._failure_text}): unconfigured")
        return _SUCCESS

    def _configured(self) -> PolicyWiring:
        if self._wiring is None:
            raise RuntimeError(f"policy_node is {self.lifecycle_state}, not configured")
        return self._wiring

    def _close_wiring(self) -> None:
        wiring, self._wiring = getattr(self, "_wiring", None), None
        if wiring is not None:
            wiring.close()

    # ------------------------------------------------------------------ services
    def _on_enable(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        self._enabled = bool(request.data)
        if self._wiring is not None:
            response.message = self._wiring.set_enabled(self._enabled)
        else:
            word = "enabled" if self._enabled else "disabled"
            response.message = (
                f"{word}; {self.lifecycle_state}: nothing is commanded before the node is "
                "configured and activated"
            )
        response.success = True
        return response

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        if self._wiring is None:
            response.success = False
            response.message = (
                f"{self.lifecycle_state}: no episode to reset; configure the node first"
            )
            return response
        response.message = self._wiring.reset_episode()
        response.success = True
        return response

    # ------------------------------------------------------------------ what tests and tools read
    def _latest(self) -> PolicyWiring:
        """The configuration now, else the last one (after a cleanup: for reports)."""
        wiring = self._wiring or self._last_wiring
        if wiring is None:
            raise RuntimeError(f"policy_node is {self.lifecycle_state} and was never configured")
        return wiring

    @property
    def config(self) -> NodeConfig:
        """The validated parameters this node runs with (after a cleanup: the last ones)."""
        return self._latest().config

    @property
    def core(self) -> StreamingCore[NodeConfig]:
        """The :class:`~relay_ros.pipeline.streaming.StreamingCore` (after a cleanup:
        the last configuration's, whose counts stay readable)."""
        return self._latest().core

    @property
    def recording(self) -> EpisodeRecording | None:
        """The configuration's :class:`~relay_ros.node.episode_recording.EpisodeRecording`,
        None when ``record_dir`` is empty."""
        return self._latest().recording

    @property
    def connection(self) -> PolicyConnection:
        """The connection to the policy server (after a cleanup: the last one's,
        closed), for its counters (``connect_attempts``, ``probes``)."""
        return self._latest().connection

    @property
    def session_id(self) -> str:
        """The session id sent with observations; ``~/reset`` starts a new one."""
        return self.core.session_id

    @property
    def counts(self) -> dict[str, int]:
        """Requests, chunks, error replies, refusals and connection errors so far."""
        return self.core.counts

    @property
    def last_refusal(self) -> str | None:
        """Why the last chunk, frame or observation was refused, in a sentence."""
        return self.core.last_refusal

    @property
    def hold_reason(self) -> str | None:
        """Why the node is holding position now, or None while it streams."""
        return self.core.hold_reason

    @property
    def latency(self) -> LatencyStats:
        """Observation -> reply latencies measured on the node clock."""
        return self.core.latency

    @property
    def pipeline_timing(self) -> dict[str, LatencyStats]:
        """Per-frame conversion, decision-to-wire and frame-to-wire seconds."""
        return self.core.pipeline_timing

    @property
    def ticks(self) -> int:
        """How many times the scheduling tick ran (timer and wake-ups)."""
        return self._latest().ticks

    @property
    def transition_error(self) -> str:
        """Why the last transition failed (``configure failed: ...``), or ""."""
        return self._failure_text

    # ------------------------------------------------------------------ diagnostics
    def diagnostics_status(self, state: str | None = None) -> DiagnosticStatus:
        """The node's health as one DiagnosticStatus (also published at 1 Hz), in
        lifecycle ``state`` (default: the state now; a transition passes the state it
        ends in)."""
        # Named by the fully qualified node name, as rqt_robot_monitor and the
        # diagnostic_aggregator key statuses: two robots' nodes (/robot1/policy_node,
        # /robot2/policy_node) show apart.
        fqn = self.get_fully_qualified_name()
        name = f"{fqn}: policy"
        state = state or self.lifecycle_state
        extra = {
            "lifecycle_state": state,
            "node": self.get_fully_qualified_name(),
            "transition_error": self._failure_text,
        }
        if self._wiring is not None:
            return self._wiring.diagnostics_status(name, extra)
        if self._failure_text:
            health = Health(Level.ERROR, self._failure_text, {})
        elif state == "finalized":
            health = Health(Level.WARN, "finalized (shut down): restart the node to use it", {})
        else:
            health = Health(
                Level.WARN, f"{state}: 'ros2 lifecycle set {fqn} configure', then 'activate'", {}
            )
        return diagnostic_status(health, name=name, hardware_id=fqn, extra=extra)

    def _publish_diagnostics(self, state: str | None = None) -> None:
        stamp = self.get_clock().now().to_msg()
        try:
            self._diagnostics.publish(diagnostic_array(self.diagnostics_status(state), stamp))
        except (InvalidHandle, _rclpy.RCLError):
            pass  # the node or its context is shutting down: nobody to tell any more

    # ------------------------------------------------------------------ lifetime
    def destroy_node(self) -> None:
        """Shut down (a hold when active; connection closed, worker joined), then
        destroy the node."""
        if self._wiring is not None:
            try:
                self.trigger_shutdown()
            except (_rclpy.RCLError, RuntimeError):
                pass  # finalized already, or the context is gone: close below
            self._close_wiring()
        super().destroy_node()


def freeze_startup_heap() -> None:
    """Move every object alive now out of the garbage collector's reach.

    Python's cyclic collector now and then scans every tracked object (its oldest
    generation); after the imports and the node's construction that is tens of
    thousands (rclpy, NumPy, OpenCV, message types), and the scan stops the executor
    thread for about 20 ms, a late chunk or request when it falls on one.
    Objects
    that live as long as the process need no scanning: ``gc.freeze()`` after startup
    (as CPython's documentation suggests for long-running processes) leaves the
    collector only what the loop allocates. Call it once, right before spinning.
    """
    gc.collect()
    gc.freeze()


def _start() -> PolicyNode:
    node = PolicyNode()
    freeze_startup_heap()
    return node


def main(args: list[str] | None = None) -> int:
    """Console entry point ``policy_node``; returns the exit code (:func:`run_node`)."""
    return run_node(
        NodeProgram(
            "policy_node",
            _start,
            usage,
            config_errors=(ParameterError, CameraMapError),
            parameter_type=expected_value,
        ),
        args,
    )


if __name__ == "__main__":
    take_stop_signals()
    sys.exit(main())
