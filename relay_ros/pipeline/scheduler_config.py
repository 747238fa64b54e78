"""The chunk scheduler's settings: :class:`SchedulerConfig`, each value checked on construction.

Plain Python; :func:`relay_ros.pipeline.settings.scheduler_config` derives one from the
node's settings and the server's metadata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from relay_ros.pipeline.adaptive_timing import AdaptiveTiming
from relay_ros.pipeline.ramp_in import check_ramp_in
from relay_ros.pipeline.smoothing import NoSmoothing, Smoothing

__all__ = ["MODES", "SchedulerConfig", "SchedulerConfigError", "SchedulerMode"]

SchedulerMode = Literal["early", "sync"]
MODES: tuple[str, ...] = ("early", "sync")


class SchedulerConfigError(ValueError):
    """A :class:`SchedulerConfig` field has an invalid value."""


def _check_number(name: str, value: object, *, minimum: float, strict: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise SchedulerConfigError(f"{name} {value!r} must be a number")
    number = float(value)
    ok = math.isfinite(number) and (number > minimum if strict else number >= minimum)
    if not ok:
        relation = ">" if strict else ">="
        raise SchedulerConfigError(f"{name} {value!r} must be a finite number {relation} {minimum}")
    return number


def _check_int(name: str, value: object, *, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise SchedulerConfigError(f"{name} {value!r} must be an integer")
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        upper = f" and <= {maximum}" if maximum is not None else ""
        raise SchedulerConfigError(f"{name} {value!r} must be >= {minimum}{upper}")
    return number


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduler settings; all times in seconds.

    Attributes:
        dt: control period, 1 / control_hz (> 0).
        horizon: actions per chunk H (>= 1).
        execute_horizon: actions E executed before the next chunk takes over
            (1 <= E <= H).
        request_lead_s: how long before the switch time the next observation is
            sent (>= 0), or ``None`` for auto (``timing``'s rule over the measured
            latencies, :func:`~relay_ros.pipeline.adaptive_timing.adaptive_lead`).
            Ignored in sync mode.
        adaptive_execute_horizon: E follows the measured latency
            (:func:`~relay_ros.pipeline.adaptive_timing.adaptive_execute_horizon`),
            ``execute_horizon`` is then its largest value; False: E is
            ``execute_horizon``.
        smoothing: How each new chunk joins the running one
            (:mod:`~relay_ros.pipeline.smoothing`).
        min_lead_s: the first published point is at least this far after the
            publication stamp (> 0); ``None`` means ``dt``. After construction
            it always holds the effective number.
        mode: ``"early"`` (publish the rest of the chunk, request early) or
            ``"sync"`` (publish E actions, request when used up).
        retry_delay_s: wait after a failed request before the next (>= 0).
        timing: the constants of the automatic lead and execute horizon.
        latency_window: number of recent latencies kept for statistics.
        publish_early_s: a held chunk is published this long before the switch
            time (>= 0, < min_lead_s). Set it to the poll period: a poll that
            lands just after the switch would otherwise find the slot after the
            executed part less than ``min_lead_s`` ahead and skip that action.
        join_still_arm: the publications move the arm, so a chunk that comes
            while none does joins the still arm (module docstring); False when
            they do not (a dry run: whatever moves the arm, it is not them, so
            every chunk keeps its own timeline).
        ramp_in_s: the first publication after the arm stood still (a start, a
            hold, a reset) runs from rest to full speed over this long
            (:mod:`~relay_ros.pipeline.ramp_in`; >= 0, 0: off).
    """

    dt: float
    horizon: int
    execute_horizon: int
    request_lead_s: float | None = None
    adaptive_execute_horizon: bool = False
    smoothing: Smoothing = NoSmoothing()
    min_lead_s: float | None = None
    mode: SchedulerMode = "early"
    retry_delay_s: float = 0.0
    timing: AdaptiveTiming = AdaptiveTiming()
    latency_window: int = 100
    publish_early_s: float = 0.0
    join_still_arm: bool = True
    ramp_in_s: float = 0.0

    def __post_init__(self) -> None:
        dt = _check_number("dt", self.dt, minimum=0.0, strict=True)
        horizon = _check_int("horizon", self.horizon, minimum=1)
        execute = _check_int("execute_horizon", self.execute_horizon, minimum=1, maximum=horizon)
        lead = self.request_lead_s
        if lead is not None:
            lead = _check_number("request_lead_s", lead, minimum=0.0, strict=False)
        min_lead = dt if self.min_lead_s is None else self.min_lead_s
        min_lead = _check_number("min_lead_s", min_lead, minimum=0.0, strict=True)
        if self.mode not in MODES:
            raise SchedulerConfigError(f"mode {self.mode!r} is not one of {list(MODES)}")
        for flag in ("join_still_arm", "adaptive_execute_horizon"):
            if not isinstance(getattr(self, flag), bool):
                raise SchedulerConfigError(f"{flag} {getattr(self, flag)!r} must be a bool")
        if not isinstance(self.smoothing, Smoothing):
            raise SchedulerConfigError(f"smoothing {self.smoothing!r} is not a Smoothing")
        if not isinstance(self.timing, AdaptiveTiming):
            raise SchedulerConfigError(f"timing {self.timing!r} is not an AdaptiveTiming")
        values = {
            "dt": dt,
            "horizon": horizon,
            "execute_horizon": execute,
            "request_lead_s": lead,
            "min_lead_s": min_lead,
            "retry_delay_s": _check_number(
                "retry_delay_s", self.retry_delay_s, minimum=0.0, strict=False
            ),
            "latency_window": _check_int("latency_window", self.latency_window, minimum=1),
            "publish_early_s": (
                publish_early := _check_number(
                    "publish_early_s", self.publish_early_s, minimum=0.0, strict=False
                )
            ),
        }
        try:
            values["ramp_in_s"] = check_ramp_in(self.ramp_in_s)
        except ValueError as exc:
            raise SchedulerConfigError(str(exc)) from None
        if publish_early >= min_lead:
            raise SchedulerConfigError(
                f"publish_early_s {self.publish_early_s!r} must be < min_lead_s {min_lead!r}"
            )
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def effective_min_lead_s(self) -> float:
        """``min_lead_s`` as the number it always is after construction (None: ``dt``)."""
        lead = self.min_lead_s
        return self.dt if lead is None else lead
