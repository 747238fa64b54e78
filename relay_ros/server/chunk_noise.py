"""Chunk-to-chunk disagreement, as a sampled (flow-matching or diffusion) VLA shows it.

Two consecutive chunks of a real VLA, computed from nearly the same observation,
do not agree: every chunk is a new sample, and now and then the sample falls into
another mode (a different approach to the same goal). `ChunkNoise` adds both to a
policy's plan, from a random generator the caller seeds:

- **sampling noise**: per dimension a constant offset (``offset_rad`` standard
  deviation) plus a slow wave along the chunk (amplitude ``wave_rad`` s.d., 0.5 to
  1.5 Hz, random phase);
- **mode switches**: with probability ``switch_probability`` per chunk, joints 1-2
  move off by ``switch_rad`` in a random direction, ramping in over ``switch_ramp_s``;
- **approach side** (:meth:`ChunkNoise.sample_side`, :meth:`ChunkNoise.turn`): the
  plan's own mode, drawn per chunk (+1 or -1, even odds) and turned ``turn_rad`` to
  that side (the visual plan curves in from the left or the right). Unlike the
  variation above, which is added to a finished plan and so is no different from
  what a client could add, the side is chosen inside the plan: a server given the
  committed actions keeps their side (`relay_ros.server.visual_policy`), a client
  can only blend between two sides.

All magnitudes scale with ``scale`` (0 = off; the turn is capped at 1 rad). The
defaults put the boundary step of unsmoothed streaming where real VLAs put it:
several times the step inside a chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["ChunkNoise"]


@dataclass(frozen=True)
class ChunkNoise:
    """Seeded chunk-to-chunk variation; see the module docstring.

    Attributes:
        scale: multiplies every magnitude; 0 disables the noise.
        offset_rad: standard deviation of the per-chunk constant offset (rad).
        wave_rad: standard deviation of the slow wave's amplitude (rad).
        switch_probability: chance per chunk of a mode switch (0..1).
        switch_rad: size of a mode switch on joints 1-2 (rad).
        switch_ramp_s: how long a mode switch takes to ramp in (s).
        turn_rad: how far the plan's approach turns to its sampled side (rad).
    """

    scale: float = 1.0
    offset_rad: float = 0.02
    wave_rad: float = 0.02
    switch_probability: float = 0.15
    switch_rad: float = 0.08
    switch_ramp_s: float = 0.2
    turn_rad: float = 0.7

    def __post_init__(self) -> None:
        if not (math.isfinite(self.scale) and self.scale >= 0):
            raise ValueError(f"chunk noise scale {self.scale!r} is not a finite number >= 0")
        if not 0.0 <= self.switch_probability <= 1.0:
            raise ValueError(f"switch_probability {self.switch_probability!r} is not in [0, 1]")

    @property
    def enabled(self) -> bool:
        """Whether `apply` changes anything."""
        return self.scale > 0

    @property
    def turn(self) -> float:
        """The approach turn of the plan's sampled side (rad): ``scale * turn_rad``, at
        most 1 rad (the sideways pace is tan(turn) of the pace towards the goal)."""
        return min(1.0, self.scale * self.turn_rad)

    def sample_side(self, rng: np.random.Generator) -> int:
        """The approach side of one chunk, +1 or -1 with even odds (one draw)."""
        return 1 if rng.random() < 0.5 else -1

    def apply(self, chunk: np.ndarray, rng: np.random.Generator, dt: float) -> np.ndarray:
        """``chunk`` (H, D) plus one sample of the variation, as float64 (a new array).

        Draws the same number of values from ``rng`` every call, so a seeded
        generator gives the same noise for the same chunk shape.
        """
        out = np.array(chunk, dtype=np.float64)
        horizon, width = out.shape
        t = (np.arange(horizon, dtype=np.float64) * dt)[:, None]
        offset = rng.standard_normal(width) * self.offset_rad
        amplitude = rng.standard_normal(width) * self.wave_rad
        frequency = rng.uniform(0.5, 1.5, size=width)
        phase = rng.uniform(0.0, 2.0 * math.pi, size=width)
        switch = rng.random() < self.switch_probability
        direction = rng.uniform(0.0, 2.0 * math.pi)
        if not self.enabled:
            return out
        noise = offset + amplitude * np.sin(2.0 * math.pi * frequency * t + phase)
        if switch:
            ramp = np.clip(t[:, 0] / self.switch_ramp_s, 0.0, 1.0)
            ramp = ramp * ramp * (3.0 - 2.0 * ramp)
            detour = self.switch_rad * np.array([math.cos(direction), math.sin(direction)])
            noise[:, : min(2, width)] += (ramp[:, None] * detour)[:, : min(2, width)]
        out += self.scale * noise
        return out
