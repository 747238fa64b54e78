"""The reference server's built-in policy: smooth, believable action chunks without a model.

Each chunk integrates an autonomous joint-space flow from the observed state, so
action 0 is (almost) the state, the arm visibly moves, and the next chunk, started
from wherever the arm got to, continues the same motion (no jump at chunk switches).

The flow, per pair of dimensions ``(2j, 2j+1)`` in polar coordinates ``(r, theta)``::

    dr/dt     = gain * (radius - r)      # converge to a circle of ``radius`` rad
    dtheta/dt = direction_j * omega_j    # then go round it

integrated in closed form at ``t = (i + 1) / control_hz`` for ``i`` in ``0..H-1``. A
last odd dimension relaxes exponentially towards ``radius / 2``. Every action is
clamped to ``[-limit, limit]``. The prompt and LoRA adapter pick the rotation
directions and speeds (different tasks look different); the random generator only
perturbs ``omega_j`` and the target radius by a few percent, so seeded calls are
reproducible and unseeded ones differ while staying smooth.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

__all__ = ["FlowParams", "SyntheticPolicy"]

# Entries kept per memo (directions per prompt, speeds per adapter); cleared when full.
_CACHE_SIZE = 256


@dataclass(frozen=True)
class FlowParams:
    """Shape of the synthetic motion.

    Attributes:
        radius: target radius of each joint pair's circle (rad).
        gain: convergence rate towards the circle (1/s).
        omega: base angular speed round the circle (rad/s); pair ``j`` uses
            ``omega * (1 + 0.1 * (j mod 5))``.
        jitter: relative random perturbation of speeds and radius (0.03 = 3 %).
        limit: every action is clamped to ``[-limit, limit]`` (rad).
    """

    radius: float = 0.4
    gain: float = 1.5
    omega: float = 2.0 * np.pi * 0.25
    jitter: float = 0.03
    limit: float = 0.8


class SyntheticPolicy:
    """Deterministic function of (state, prompt, adapter, random generator) -> chunk.

    Args:
        action_horizon: actions per chunk ``H``.
        control_hz: action rate (Hz); consecutive actions are ``1 / control_hz`` s apart.
        params: motion shape.
    """

    def __init__(
        self, *, action_horizon: int, control_hz: float, params: FlowParams | None = None
    ) -> None:
        if action_horizon < 1 or control_hz <= 0:
            raise ValueError(
                f"action_horizon={action_horizon}, control_hz={control_hz}; "
                "expected action_horizon >= 1 and control_hz > 0"
            )
        self.action_horizon = action_horizon
        self.control_hz = float(control_hz)
        self.params = params or FlowParams()
        # Times of the H actions after the observation (s), as a column, and the radial
        # decay at those times: both depend only on the constructor arguments.
        self._t = (np.arange(1, action_horizon + 1, dtype=np.float64) / self.control_hz)[:, None]
        self._decay = np.exp(-self.params.gain * self._t)
        # Per-request work that repeats: rotation directions per (prompt, pairs) and base
        # speeds per (pairs, speed). Bounded, so arbitrary prompts cannot grow memory.
        self._directions: dict[tuple[str, int], np.ndarray] = {}
        self._speeds: dict[tuple[int, float], np.ndarray] = {}

    def chunk(
        self,
        state: np.ndarray,
        rng: np.random.Generator,
        *,
        prompt: str = "",
        lora: str | None = None,
        lora_scale: float = 1.0,
        action_dim: int | None = None,
    ) -> np.ndarray:
        """One chunk of ``H`` actions starting at ``state``.

        Args:
            state: 1-D joint vector (rad).
            rng: source of the small perturbations (seeded for reproducible chunks).
            prompt: task text; picks rotation directions.
            lora: adapter name; changes the speeds, scaled by ``lora_scale``.
            action_dim: width of each action (default: ``len(state)``); extra dimensions
                start at 0, missing ones are dropped.

        Returns:
            float32 array ``(H, action_dim)`` within ``[-limit, limit]``.
        """
        p = self.params
        width = state.shape[0] if action_dim is None else action_dim
        start = np.zeros(width, dtype=np.float64)
        n = min(width, state.shape[0])
        start[:n] = state[:n]
        pairs = width // 2
        speed = 1.0
        if lora is not None:
            speed += 0.25 * lora_scale * ((zlib.crc32(lora.encode("utf-8")) % 1000) / 1000 - 0.5)
        noise = rng.standard_normal(pairs + 1)
        radius = p.radius * (1.0 + p.jitter * noise[pairs])

        decay = self._decay
        out = np.empty((self.action_horizon, width), dtype=np.float32)
        if pairs:
            omega = self._base_omega(pairs, speed) * (1.0 + p.jitter * noise[:pairs])
            x, y = start[0 : 2 * pairs : 2], start[1 : 2 * pairs : 2]
            r = radius + (np.hypot(x, y) - radius) * decay
            theta = np.arctan2(y, x) + self._direction(prompt, pairs) * omega * self._t
            # Products in float64, rounded once into the float32 output.
            np.multiply(r, np.cos(theta), out=out[:, 0 : 2 * pairs : 2])
            np.multiply(r, np.sin(theta), out=out[:, 1 : 2 * pairs : 2])
        if width % 2:
            target = radius / 2.0
            out[:, -1] = target + (start[-1] - target) * decay[:, 0]
        # Clamping after the float32 rounding gives the same values as before it, because
        # float32(limit) is the rounding of every float64 value at the limit.
        limit = np.float32(p.limit)
        np.minimum(out, limit, out=out)
        np.maximum(out, -limit, out=out)
        return out

    def _direction(self, prompt: str, pairs: int) -> np.ndarray:
        """Task-dependent rotation direction (+1/-1) of each joint pair."""
        key = (prompt, pairs)
        direction = self._directions.get(key)
        if direction is None:
            bits = zlib.crc32(prompt.encode("utf-8"))
            direction = np.array([1.0 if (bits >> (j % 32)) & 1 else -1.0 for j in range(pairs)])
            if len(self._directions) >= _CACHE_SIZE:
                self._directions.clear()
            self._directions[key] = direction
        return direction

    def _base_omega(self, pairs: int, speed: float) -> np.ndarray:
        """Angular speed of each pair before the random perturbation (rad/s)."""
        key = (pairs, speed)
        base = self._speeds.get(key)
        if base is None:
            base = self.params.omega * speed * (1.0 + 0.1 * (np.arange(pairs) % 5))
            if len(self._speeds) >= _CACHE_SIZE:
                self._speeds.clear()
            self._speeds[key] = base
        return base
