"""A reference-server policy that follows a recording: the chunk is the future the robot had.

For an observation taken at time ``t`` (bag time in a replay), action ``i`` of the
chunk is the recorded joint states at ``t + i * dt`` (``dt = 1 / control_hz``),
placed into the action vector the way the node reads it back (each output's
joints at its action dimensions; for GR00T, in the action groups). Replaying a
bag through policy_node against this policy, a perfect bridge would command
exactly the recorded motion: the gap between commanded and recorded positions is
the timing error the bridge adds (latency, dropped actions, request leads,
blending, holds), measured on the team's own data.

How the policy knows ``t``: its metadata says ``needs_observation_time: true``,
and the node then sends its observation time (the ``t_obs`` its chunk timing
starts from, in seconds on the node's clock) as the observation's
``observation_time`` (see :mod:`relay_ros.pipeline.observation`). That is exact:
the node times action ``i`` from the same number. Real servers never announce the
key, so they never receive it.

Joint positions are interpolated linearly between recorded samples and held at
the first/last sample outside the recording. Action dimensions no output reads
are 0. Plain Python and NumPy; :func:`policy_for_config` builds it for a node
configuration, and :mod:`relay_ros.bag.recorded_policy` reads the bag and the params
file for ``relay-policy-server --recorded-bag``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from relay_ros.formats import WireFormat, format_for
from relay_ros.formats.embodiment import Embodiment, load_embodiment
from relay_ros.pipeline.outputs import load_outputs
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.server.metadata import build_metadata

__all__ = [
    "OBSERVATION_TIME_KEY",
    "RecordedPolicy",
    "RecordedPolicyError",
    "observation_time",
    "policy_for_config",
]

logger = logging.getLogger(__name__)

#: Observation key carrying the observation time (float seconds, node clock).
OBSERVATION_TIME_KEY = "observation_time"


class RecordedPolicyError(ValueError):
    """The recorded policy cannot be built, or an observation does not say its time."""


class RecordedPolicy:
    """Chunks read from recorded joint states at the observation's time.

    Args:
        joint_times: (M,) recording times of the joint states, seconds, increasing
            (the clock ``observation_time`` is on: bag time for a replay).
        joint_positions: joint name -> (M,) positions, NaN where a sample lacks it.
        dims: joint name -> column of the flat (H, D) chunk it is written to
            (the node's output mapping).
        action_horizon: actions per chunk ``H``.
        control_hz: action rate (Hz); action ``i`` is for ``t + i / control_hz``.
        width: ``D``, the width of the flat chunk (π0: ``action_dim``; GR00T: the
            sum of the group widths).
        wire_format: The server's wire format: the reply's ``actions`` are its
            reading of the flat chunk (GR00T: ``{key: (1, H, width)}``); None: the
            flat chunk.
        embodiment: The GR00T embodiment the format splits the chunk by.

    Raises:
        RecordedPolicyError: a joint without recorded samples, a dim out of range,
            or inconsistent sizes.
    """

    def __init__(
        self,
        joint_times: np.ndarray,
        joint_positions: Mapping[str, np.ndarray],
        *,
        dims: Mapping[str, int],
        action_horizon: int,
        control_hz: float,
        width: int,
        wire_format: WireFormat | None = None,
        embodiment: Embodiment | None = None,
    ) -> None:
        times = np.asarray(joint_times, dtype=np.float64)
        if times.ndim != 1 or times.size == 0:
            raise RecordedPolicyError("the recording has no joint states")
        if action_horizon < 1 or not (math.isfinite(control_hz) and control_hz > 0):
            raise RecordedPolicyError(
                f"action_horizon={action_horizon}, control_hz={control_hz}; expected >= 1 and > 0"
            )
        if embodiment is not None and embodiment.action_dim != width:
            raise RecordedPolicyError(
                f"action groups {list(embodiment.action_groups)} do not add up to width {width}"
            )
        self._series: list[tuple[int, np.ndarray, np.ndarray]] = []
        for joint, dim in dims.items():
            if not 0 <= dim < width:
                raise RecordedPolicyError(f"joint {joint!r}: dim {dim} is outside 0..{width - 1}")
            positions = joint_positions.get(joint)
            if positions is None:
                raise RecordedPolicyError(
                    f"joint {joint!r} is not recorded; recorded joints are {list(joint_positions)}"
                )
            values = np.asarray(positions, dtype=np.float64)
            valid = np.isfinite(values)
            if not valid.any():
                raise RecordedPolicyError(f"joint {joint!r} has no recorded position")
            self._series.append((int(dim), times[valid], values[valid]))
        self.action_horizon = int(action_horizon)
        self.control_hz = float(control_hz)
        self.width = int(width)
        self._format = wire_format
        self._embodiment = embodiment
        self._offsets = np.arange(self.action_horizon, dtype=np.float64) / self.control_hz
        self.start = float(times[0])
        self.end = float(times[-1])

    @property
    def metadata(self) -> dict[str, Any]:
        """Merged into the server's metadata: the timing this policy follows, and the key."""
        return {
            "action_horizon": self.action_horizon,
            "control_hz": self.control_hz,
            "needs_observation_time": True,
        }

    def chunk(self, t: float) -> np.ndarray:
        """The flat (H, D) float32 chunk for an observation at ``t`` (seconds)."""
        at = t + self._offsets
        out = np.zeros((self.action_horizon, self.width), dtype=np.float64)
        for dim, times, values in self._series:
            out[:, dim] = np.interp(at, times, values)
        return out.astype(np.float32)

    def infer(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """The reply for one (validated) observation.

        Raises:
            RecordedPolicyError: the observation has no finite ``observation_time``
                (the server answers ``Internal inference error`` and logs this).
        """
        t = observation_time(obs)
        if not self.start - 1.0 <= t <= self.end + 1.0:
            logger.warning(
                "observation_time %.3f is outside the recording [%.3f, %.3f]; "
                "holding the first/last recorded position",
                t,
                self.start,
                self.end,
            )
        flat = self.chunk(t)
        if self._format is None:
            return {"actions": flat}
        return {"actions": self._format.reply_actions(flat, self._embodiment)}

    @property
    def embodiment(self) -> Embodiment | None:
        """The GR00T embodiment the reply is split by, or None."""
        return self._embodiment

    def reset(self) -> None:
        """Nothing to forget: the chunk depends only on the observation time."""


def observation_time(obs: Mapping[str, Any]) -> float:
    """The ``observation_time`` of an observation, in seconds.

    Raises:
        RecordedPolicyError: missing, not a number, or not finite.
    """
    value = obs.get(OBSERVATION_TIME_KEY)
    if value is None:
        raise RecordedPolicyError(
            f"observation has no {OBSERVATION_TIME_KEY!r}; the recorded policy needs the "
            "observation time (relay_ros policy_node sends it when the metadata says "
            "needs_observation_time)"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise RecordedPolicyError(f"{OBSERVATION_TIME_KEY} is {value!r}; expected seconds")
    t = float(value)
    if not math.isfinite(t):
        raise RecordedPolicyError(f"{OBSERVATION_TIME_KEY} is {t!r}; expected a finite number")
    return t


def policy_for_config(
    config: Any,
    joint_times: np.ndarray,
    joint_positions: Mapping[str, np.ndarray],
    *,
    embodiment: str | None = None,
) -> RecordedPolicy:
    """The recorded policy for a node configuration (its model and outputs).

    Raises:
        RecordedPolicyError: the outputs do not fit the model's action space, or a
            commanded joint is not recorded.
    """
    try:
        layout = config.layout or None
        fmt = format_for(config.model, layout)
        body = load_embodiment(embodiment) if fmt.needs_embodiment else None
        metadata = build_metadata(config.model, embodiment=body, layout=layout)
        # The node's view of this server: the same output mapping it will apply.
        server = ServerSpec.from_metadata(metadata, model=config.model, layout=layout)
        outputs = load_outputs({o.name: o.as_mapping() for o in config.outputs}, server)
        width = server.chunk_width
    except ValueError as exc:
        raise RecordedPolicyError(f"outputs do not fit {config.model}: {exc}") from None
    dims = {joint: dim for out in outputs for joint, dim in zip(out.joints, out.dims)}
    return RecordedPolicy(
        joint_times,
        joint_positions,
        dims=dims,
        action_horizon=int(metadata["action_horizon"]),
        control_hz=float(metadata["control_hz"]),
        width=width,
        wire_format=fmt,
        embodiment=body,
    )
