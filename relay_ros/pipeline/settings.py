"""The settings the streaming core runs with, and which of them may change live.

:class:`StreamingSettings` names what :class:`~relay_ros.pipeline.streaming.StreamingCore`
reads; :class:`relay_ros.node.node_config.NodeConfig` has all of it, and so does any
object a test builds. It is the one place that says which settings change live:
those of :class:`LiveSettings` (:data:`LIVE_SETTINGS`) change through
``StreamingCore.apply_config``; the others, which come with a node's wiring (model,
joints, outputs, rates, encoding), need a restart (:data:`FIXED_SETTINGS`). The
node's parameter table takes its live flags from here
(:mod:`relay_ros.node.params`). :func:`check_live_settings` refuses values the
safety checks would only reject when a chunk arrives, and :func:`scheduler_config`
derives the scheduler's settings from them and the server.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from relay_ros.pipeline.adaptive_timing import AdaptiveTiming
from relay_ros.pipeline.gate.motion import MotionLimits
from relay_ros.pipeline.joint_limits import JointLimit
from relay_ros.pipeline.safety import LIMITS_MODES, JointLimits, SafetyError
from relay_ros.pipeline.scheduler_config import SchedulerConfig, SchedulerConfigError, SchedulerMode
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.pipeline.smoothing import SMOOTHING_CHOICES, SmoothingError, make_smoothing

__all__ = [
    "FIXED_SETTINGS",
    "LIVE_SETTINGS",
    "FixedSettings",
    "LiveSettings",
    "OutputSettings",
    "StreamingConfigError",
    "StreamingSettings",
    "check_change",
    "check_live_settings",
    "motion_limits",
    "scheduler_config",
]


class StreamingConfigError(ValueError):
    """A configuration change the core cannot apply; nothing was changed."""


class OutputSettings(Protocol):
    """One configured output controller (:class:`relay_ros.node.node_config.OutputSpec`)."""

    @property
    def name(self) -> str: ...
    @property
    def joints(self) -> tuple[str, ...]: ...
    def as_mapping(self) -> dict[str, Any]: ...


class FixedSettings(Protocol):
    """The settings that come with the node's wiring: a change needs a restart."""

    @property
    def model(self) -> str: ...
    @property
    def layout(self) -> str: ...
    @property
    def state_joints(self) -> tuple[str, ...]: ...
    @property
    def outputs(self) -> Sequence[OutputSettings]: ...
    @property
    def commanded_joints(self) -> tuple[str, ...]: ...
    @property
    def control_hz(self) -> float | None: ...
    @property
    def tick_hz(self) -> float: ...
    @property
    def image_encoding(self) -> str: ...
    @property
    def jpeg_quality(self) -> int: ...


class LiveSettings(Protocol):
    """The settings ``StreamingCore.apply_config`` changes while it runs."""

    @property
    def prompt(self) -> str: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def lora(self) -> str: ...
    @property
    def lora_scale(self) -> float: ...
    @property
    def joint_limits(self) -> Mapping[str, JointLimit]: ...
    @property
    def limits_problem(self) -> str | None:
        """Why some commanded joint has no limits yet (waiting for the URDF), or None."""
        ...

    @property
    def limits_mode(self) -> str: ...
    @property
    def execute_horizon(self) -> int | None: ...
    @property
    def request_lead_s(self) -> float | None: ...
    @property
    def request_mode(self) -> str: ...
    @property
    def smoothing(self) -> str: ...
    @property
    def blend_steps(self) -> int: ...
    @property
    def dry_run(self) -> bool: ...
    @property
    def max_joint_step(self) -> float: ...
    @property
    def interpolate_from_desired_state(self) -> bool: ...
    @property
    def max_tracking_error(self) -> float: ...
    @property
    def sensor_timeout_s(self) -> float: ...
    @property
    def retry_delay_s(self) -> float: ...
    @property
    def request_timeout_s(self) -> float | None: ...
    @property
    def ramp_in_s(self) -> float: ...


class StreamingSettings(FixedSettings, LiveSettings, Protocol):
    """The settings the core reads (:class:`relay_ros.node.node_config.NodeConfig` has them)."""


def _settings(protocol: type) -> tuple[str, ...]:
    """The property names of ``protocol`` and its bases, in declaration order."""
    names: list[str] = []
    for klass in reversed(protocol.__mro__):
        names += [n for n, v in vars(klass).items() if isinstance(v, property) and n not in names]
    return tuple(names)


#: Settings ``StreamingCore.apply_config`` changes while it runs.
LIVE_SETTINGS: tuple[str, ...] = _settings(LiveSettings)
#: Every other setting the core reads: changing one needs a restart of the node.
FIXED_SETTINGS: tuple[str, ...] = tuple(
    name for name in _settings(StreamingSettings) if name not in LIVE_SETTINGS
)


def scheduler_config(
    cfg: StreamingSettings, spec: ServerSpec, *, timing: AdaptiveTiming | None = None
) -> SchedulerConfig:
    """The scheduler's settings for ``cfg`` and the connected server; ``timing``: the
    automatic lead and execute horizon's rule (None: its defaults).

    ``execute_horizon`` None (the parameter's 0) lets E follow the latency in early
    mode, up to half the server's horizon (:mod:`~relay_ros.pipeline.adaptive_timing`);
    sync requests, openpi's broker, run E = H/2, and so does the server's prefix,
    whose soft region the server sizes from E (a short one kinks). The smoothing is
    ``cfg.smoothing`` for this server (:func:`~relay_ros.pipeline.smoothing.make_smoothing`).

    Raises:
        StreamingConfigError: no control rate known, values the server's horizon
            does not allow (e.g. ``execute_horizon`` > ``action_horizon``), or a
            smoothing the server cannot support.
    """
    control_hz = cfg.control_hz or spec.control_hz
    if not control_hz:
        raise StreamingConfigError(
            "server metadata has no control_hz; set the 'control_hz' parameter"
        )
    execute = cfg.execute_horizon or max(1, spec.action_horizon // 2)
    try:
        smoothing = make_smoothing(
            cfg.smoothing,
            server_prefix=spec.action_prefix,
            limits=motion_limits(cfg, dt=1.0 / control_hz),
            blend_steps=cfg.blend_steps,
            execute_horizon=execute,
        )
        return SchedulerConfig(
            dt=1.0 / control_hz,
            horizon=spec.action_horizon,
            execute_horizon=execute,
            request_lead_s=cfg.request_lead_s,
            adaptive_execute_horizon=(
                cfg.execute_horizon is None
                and cfg.request_mode == "early"
                and not smoothing.needs_prefix
            ),
            smoothing=smoothing,
            timing=timing or AdaptiveTiming(),
            mode=cast(SchedulerMode, cfg.request_mode),  # checked by SchedulerConfig
            retry_delay_s=cfg.retry_delay_s,
            # The timer polls every tick: publish up to one tick before the switch
            # so that no action slot is skipped at the boundary.
            publish_early_s=min(1.0 / cfg.tick_hz, 0.5 / control_hz),
            # In dry run nothing the node publishes moves the arm.
            join_still_arm=not cfg.dry_run,
            ramp_in_s=cfg.ramp_in_s,
        )
    except (SchedulerConfigError, SmoothingError) as exc:
        raise StreamingConfigError(str(exc)) from None


def motion_limits(cfg: StreamingSettings, *, dt: float | None = None) -> MotionLimits | None:
    """The commanded joints' limits in chunk columns, with the default acceleration
    bound of the action period ``dt`` (the gate's), or None while some joint has none
    (the core then publishes nothing)."""
    limits = cfg.joint_limits
    joints = cfg.commanded_joints
    if not all(isinstance(limits.get(joint), JointLimit) for joint in joints):
        return None
    try:
        return MotionLimits.from_joint_limits(limits, joints, dt=dt)
    except SafetyError:
        return None


def check_change(old: StreamingSettings, new: StreamingSettings) -> None:
    """Refuse a live change of ``old`` to ``new`` that touches a :data:`FIXED_SETTINGS`
    setting, or values the safety checks would reject (:func:`check_live_settings`)."""
    fixed = [name for name in FIXED_SETTINGS if getattr(new, name) != getattr(old, name)]
    if fixed:
        raise StreamingConfigError(
            f"{fixed} cannot change while the node runs; restart the node with the new values"
        )
    check_live_settings(new)


def check_live_settings(cfg: StreamingSettings) -> None:
    """Refuse settings the safety checks would reject only when a chunk arrives."""
    try:
        JointLimits.from_mapping(cfg.joint_limits, cfg.commanded_joints)
    except SafetyError as exc:
        raise StreamingConfigError(str(exc)) from None
    if cfg.limits_mode not in LIMITS_MODES:
        raise StreamingConfigError(
            f"limits_mode {cfg.limits_mode!r} is not one of {list(LIMITS_MODES)}"
        )
    if cfg.smoothing not in SMOOTHING_CHOICES:
        raise StreamingConfigError(
            f"smoothing {cfg.smoothing!r} is not one of {list(SMOOTHING_CHOICES)}"
        )
    for name in ("max_joint_step", "max_tracking_error", "sensor_timeout_s"):
        value = getattr(cfg, name)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise StreamingConfigError(f"{name} {value!r} must be a number > 0")
