"""The reference server's built-in policies: action chunks without a model.

`ReferencePolicy` is what the server runs for every observation: one of two plans,

- ``"flow"`` (`SyntheticPolicy`, below): a smooth joint-space motion that ignores the
  cameras; chunks join seamlessly;
- ``"visual"`` (`relay_ros.server.visual_policy.VisualPolicy`): finds the red target
  of the simulated world in the cameras and moves the arm to it;

then, optionally, seeded chunk-to-chunk variation (`relay_ros.server.chunk_noise`)
and prefix conditioning (`relay_ros.server.action_prefix`), in that order, so the
committed prefix is reproduced exactly whatever the noise; last, the robot's speed and
acceleration (`relay_ros.server.policy_robot`: the visual plan's 1.6 rad/s unless
others are given).

`SyntheticPolicy`: each chunk integrates an autonomous joint-space flow from the observed state, so
action 0 is the state, the arm visibly moves, and the next chunk, started from
wherever the arm got to, continues the same motion (no jump at chunk switches).

The flow is driven by the first two dimensions, in polar coordinates ``(r, theta)``::

    dr/dt     = gain * (radius - r)      # converge to a circle of ``radius`` rad
    dtheta/dt = direction * omega        # then go round it

and every other dimension ``d`` relaxes towards a sinusoid of that phase::

    target_d  = radius * sin(m_d * theta + phi_d)      # m_d in {1, 2}
    x_d(t)    = target_d(t) + (x_d(0) - target_d(0)) * exp(-gain * t)

integrated in closed form at ``t = i / control_hz`` for ``i`` in ``0..H-1``: action
``i`` is meant for ``t_obs + i*dt``, as the streaming timeline says. Because the
phase comes from dimensions 0 and 1 only, a dimension whose state is always zero
(pi0's padding to 32) never disturbs the others, and a gripper at dimension 6 moves
as smoothly across chunk switches as the arm. Every action is clamped to
``[-limit, limit]``, widened per joint to include where it starts (`keep_within`):
action 0 is always the observed state, so a chunk never starts with a jump, whatever
the pose (a dry-run arm that stands at 1.1 rad included). The prompt picks the
direction and phases (different tasks look different), the LoRA adapter the speed;
the random generator only perturbs ``omega`` and the radius by a few percent, so
seeded calls are reproducible and unseeded ones differ while staying smooth.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay_ros.formats.requests import Request
from relay_ros.server.action_prefix import apply_prefix
from relay_ros.server.action_prefix import soft_steps as soft_window
from relay_ros.server.chunk_noise import ChunkNoise
from relay_ros.server.policy_robot import VISUAL_MAX_SPEED, PolicyRobot

__all__ = ["POLICY_KINDS", "FlowParams", "ReferencePolicy", "SyntheticPolicy"]

#: Plans `ReferencePolicy` can run.
POLICY_KINDS = ("flow", "visual")

# Entries kept per memo (directions per prompt, speeds per adapter); cleared when full.
_CACHE_SIZE = 256


@dataclass(frozen=True)
class FlowParams:
    """Shape of the synthetic motion.

    Attributes:
        radius: target radius of each joint pair's circle (rad).
        gain: convergence rate towards the circle (1/s).
        omega: angular speed round the circle (rad/s), scaled by the adapter.
        jitter: relative random perturbation of speed and radius (0.02 = 2 %).
        limit: every action is clamped to ``[-limit, limit]`` (rad).
    """

    radius: float = 0.4
    gain: float = 1.5
    omega: float = 2.0 * np.pi * 0.25
    jitter: float = 0.02
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
        # Times of the H actions after the observation (s), as a column, and the decay
        # at those times: both depend only on the constructor arguments.
        self._t = (np.arange(action_horizon, dtype=np.float64) / self.control_hz)[:, None]
        self._decay = np.exp(-self.params.gain * self._t)
        # Per-request work that repeats: direction and phases per (prompt, width), base
        # speed per adapter. Bounded, so arbitrary prompts cannot grow memory.
        self._shapes: dict[tuple[str, int], tuple[float, np.ndarray, np.ndarray]] = {}

    def chunk(
        self,
        state: np.ndarray,
        rng: np.random.Generator,
        *,
        prompt: str = "",
        lora: str | None = None,
        lora_scale: float = 1.0,
        action_dim: int | None = None,
        rest: np.ndarray | None = None,
    ) -> np.ndarray:
        """One chunk of ``H`` actions starting at ``state``.

        Args:
            state: 1-D joint vector (rad).
            rng: source of the small perturbations (seeded for reproducible chunks).
            prompt: task text; picks rotation directions.
            lora: adapter name; changes the speeds, scaled by ``lora_scale``.
            action_dim: width of each action (default: ``len(state)``); extra dimensions
                start at 0, missing ones are dropped.
            rest: the robot's rest pose per dimension (default 0): the circles and
                sinusoids are centred on it.

        Returns:
            float32 array ``(H, action_dim)`` within ``[rest - limit, rest + limit]``.
        """
        p = self.params
        width = state.shape[0] if action_dim is None else action_dim
        start = np.zeros(max(width, 2), dtype=np.float64)
        n = min(width, state.shape[0])
        start[:n] = state[:n]
        speed = 1.0
        if lora is not None:
            speed += 0.25 * lora_scale * ((zlib.crc32(lora.encode("utf-8")) % 1000) / 1000 - 0.5)
        noise = rng.standard_normal(2)
        radius = p.radius * (1.0 + p.jitter * noise[1])
        direction, harmonics, phases = self._shape(prompt, width)
        omega = direction * p.omega * speed * (1.0 + p.jitter * noise[0])

        centre = np.zeros(max(width, 2))
        if rest is not None:
            centre[: min(width, len(rest))] = np.asarray(rest, dtype=np.float64)[:width]
        t, decay = self._t, self._decay
        x, y = start[0] - centre[0], start[1] - centre[1]
        r = radius + (np.hypot(x, y) - radius) * decay  # (H, 1)
        theta = np.arctan2(y, x) + omega * t  # (H, 1)
        full = np.empty((self.action_horizon, max(width, 2)), dtype=np.float64)
        full[:, 0:1] = centre[0] + r * np.cos(theta)
        full[:, 1:2] = centre[1] + r * np.sin(theta)
        if width > 2:
            target = centre[2:] + radius * np.sin(harmonics * theta + phases)  # (H, width-2)
            full[:, 2:] = target + (start[2:] - target[0]) * decay
        keep_within(full, start, p.limit, centre)
        return full[:, :width].astype(np.float32)

    def _shape(self, prompt: str, width: int) -> tuple[float, np.ndarray, np.ndarray]:
        """Task-dependent rotation direction, harmonics and phases of the other dims."""
        key = (prompt, width)
        shape = self._shapes.get(key)
        if shape is None:
            bits = zlib.crc32(prompt.encode("utf-8"))
            direction = 1.0 if bits & 1 else -1.0
            dims = np.arange(2, max(width, 2))
            harmonics = (1.0 + (dims % 2)).astype(np.float64)
            phases = 2.0 * np.pi * (((bits >> 1) % 97) / 97.0 + dims / 7.0)
            shape = (direction, harmonics, phases)
            if len(self._shapes) >= _CACHE_SIZE:
                self._shapes.clear()
            self._shapes[key] = shape
        return shape


class ReferencePolicy:
    """The built-in policy of one model: a plan, then noise, then the action prefix.

    Args:
        kind: ``"flow"`` or ``"visual"`` (`POLICY_KINDS`).
        action_horizon: actions per chunk ``H``.
        control_hz: action rate (Hz).
        noise: chunk-to-chunk variation (None = none).
        soft_steps: cross-fade after an action prefix (None: from the request,
            `relay_ros.server.action_prefix.soft_steps`).
        robot: the speed, acceleration and rest pose of the robot the chunks are for
            (None: the visual plan's `VISUAL_MAX_SPEED`, the flow's no bound; rest 0).

    Raises:
        ValueError: an unknown kind, or a bad horizon or rate.
    """

    def __init__(
        self,
        kind: str,
        *,
        action_horizon: int,
        control_hz: float,
        noise: ChunkNoise | None = None,
        soft_steps: int | None = None,
        robot: PolicyRobot | None = None,
    ) -> None:
        if kind not in POLICY_KINDS:
            raise ValueError(f"policy kind {kind!r} is not one of {list(POLICY_KINDS)}")
        self.kind = kind
        if robot is None:
            robot = PolicyRobot((VISUAL_MAX_SPEED,)) if kind == "visual" else PolicyRobot()
        self.robot = robot
        self.dt = 1.0 / float(control_hz)
        self.noise = noise
        self.soft_steps = soft_steps
        self._flow = SyntheticPolicy(action_horizon=action_horizon, control_hz=control_hz)
        self._visual: Any = None
        if kind == "visual":
            # Imported here: it pulls in OpenCV and the simulated world.
            from relay_ros.server.visual_policy import VisualPolicy

            self._visual = VisualPolicy(action_horizon=action_horizon, control_hz=control_hz)

    def chunk(self, request: Request, rng: np.random.Generator, *, action_dim: int) -> np.ndarray:
        """The float32 chunk ``(H, action_dim)`` for a validated observation.

        With an action prefix the visual plan keeps the approach side of the
        committed actions; then the noise, then the prefix (hard rows and the soft
        window). The plan starts from the observed state at ``t_obs``, on the
        chunk's own timeline, like a policy that decided then; except when the
        ``d = committed_steps`` committed rows hold still (the arm stands: the first
        chunk after a start, a hold or a reset, or sync requests): then it starts
        where they end, at row ``d - 1``, instead of catching up with a motion the
        arm could not have begun.
        """
        prefix, committed = request.action_prefix, request.committed_steps
        noise = self.noise if self.noise is not None and self.noise.enabled else None
        side = noise.sample_side(rng) if noise is not None else 1  # drawn even when pinned
        held = None  # the committed rows when they hold still
        if prefix is not None and committed > 0 and _holds_still(prefix[:committed]):
            held = prefix[:committed]
        start = held[-1] if held is not None else request.state
        rest = self.robot.rest_pose(action_dim) if self.robot.rest else None
        if self._visual is not None:
            plan = self._visual.chunk(
                request.state,
                request.images or {},
                action_dim=action_dim,
                start=start,
                turn=noise.turn if noise is not None else 0.0,
                side=side,
                committed=None if prefix is None else prefix[:committed],
                rest=rest,
            )
        else:
            plan = self._flow.chunk(
                np.asarray(start, dtype=np.float32),
                rng,
                prompt=request.prompt,
                lora=request.lora,
                lora_scale=request.lora_scale,
                action_dim=action_dim,
                rest=rest,
            )
        if held is not None:
            # The plan's action 0 is the last committed row: shift it there.
            plan = np.vstack([held[:-1], plan[: len(plan) - committed + 1]])
        if noise is not None:
            plan = noise.apply(plan, rng, self.dt)
            if self._visual is None:
                start_row = np.asarray(start, dtype=np.float64).reshape(-1)
                plan = keep_within(
                    np.asarray(plan, dtype=np.float64), start_row, self._flow.params.limit, rest
                )
        if prefix is not None:
            window = self.soft_steps
            if window is None:
                window = soft_window(request.execute_horizon, len(plan))
            plan = apply_prefix(plan, prefix, committed, window)
        plan = self.robot.apply(plan, committed if prefix is not None else 0, self.dt)
        return np.asarray(plan, dtype=np.float32)


def keep_within(
    plan: np.ndarray, start: np.ndarray, limit: float, centre: np.ndarray | None = None
) -> np.ndarray:
    """``plan`` (H, D) clipped in place to ``[centre - limit, centre + limit]`` per joint
    (``centre``: the rest pose, default 0), widened to include the joint's ``start``: a
    joint that starts outside the range (an arm at 1.1 rad) starts where it is and
    comes back into it smoothly, instead of a first action ``limit`` away from the
    observed state (a dry run would refuse that jump). Returns ``plan``."""
    width = plan.shape[1]
    begin = np.zeros(width)
    n = min(width, start.shape[0])
    begin[:n] = start[:n]  # padded dimensions start at 0
    middle = np.zeros(width) if centre is None else np.asarray(centre, dtype=np.float64)[:width]
    np.clip(plan, np.minimum(middle - limit, begin), np.maximum(middle + limit, begin), out=plan)
    return plan


def _holds_still(rows: np.ndarray) -> bool:
    """Whether committed rows all repeat the first (an arm that stands)."""
    return bool(np.abs(rows - rows[0]).max() < 1e-6)
