"""policy_node's side of the action_prefix extension, on StreamingCore's synthetic clock:
the keys go out only with smoothing 'prefix' (refused on a server that does not
advertise them), carry what the controller will follow, and a server that honours
them makes consecutive chunks join."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from streaming_rig import CoreRig  # test/ helper

from relay_ros.formats.embodiment import load_embodiment
from relay_ros.pipeline.interpolation import finite_difference_velocities, hermite_state
from relay_ros.pipeline.settings import StreamingConfigError
from relay_ros.server.action_prefix import apply_prefix
from relay_ros.server.metadata import build_metadata

H = 50


def disagreeing_policy(*, honour_prefix: bool) -> Any:
    """Chunks from the state that each head off by a different offset (a policy that
    changes its mind); with ``honour_prefix`` they start with the committed actions."""
    calls = [0]

    def infer(obs: dict[str, Any]) -> np.ndarray:
        calls[0] += 1
        state = np.asarray(obs["state"], dtype=np.float64).reshape(-1)
        offset = 0.01 if calls[0] % 2 else -0.01
        ramp = np.clip(np.arange(H) / 5.0, 0.0, 1.0)[:, None] * offset
        plan = state[None, :] + ramp + np.arange(H)[:, None] * 0.002
        if honour_prefix and "action_prefix" in obs:
            plan = apply_prefix(plan, obs["action_prefix"], obs["committed_steps"], 10)
        return plan.astype(np.float32)

    return infer


def previews(rig: CoreRig) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """(stamp, absolute point times, positions) of every chunk on ~/preview."""
    out = []
    for msg in rig.chunks(None):
        points = msg.points
        out.append((points.stamp, points.stamp + points.time_from_start, points.positions))
    return out


def boundary_jumps(rig: CoreRig) -> list[float]:
    """At each switch: the largest joint distance between the old trajectory at the new
    one's first point and that first point."""
    chunks = previews(rig)
    jumps = []
    for (_, old_t, old_p), (_, new_t, new_p) in zip(chunks, chunks[1:]):
        old_at = np.array([np.interp(new_t[0], old_t, old_p[:, j]) for j in range(old_p.shape[1])])
        jumps.append(float(np.abs(new_p[0] - old_at).max()))
    return jumps


PREFIX = {"smoothing": "prefix", "execute_horizon": 25}


def test_prefix_is_sent_only_with_smoothing_prefix_on_a_server_that_advertises_it() -> None:
    for metadata in (None, build_metadata("pi05", action_prefix=True)):  # auto: splice
        plain = CoreRig(metadata=metadata)
        plain.connect()
        plain.run_until(lambda rig=plain: len(rig.chunks()) >= 3)
        assert all(
            "action_prefix" not in obs and "committed_steps" not in obs
            for obs in plain.observations
        )
    # Asked for on a server without the extension: refused at connect, with the reason.
    refused = CoreRig(overrides=PREFIX)
    refused.connect()
    assert refused.core.server is None
    assert "needs a server that advertises the action_prefix extension" in (
        refused.core.config_error or ""
    )
    live = CoreRig()
    live.connect()
    with pytest.raises(StreamingConfigError, match="action_prefix extension"):
        live.core.apply_config(dataclasses.replace(live.config, smoothing="prefix"), live.now)

    rig = CoreRig(metadata=build_metadata("pi05", action_prefix=True), overrides=PREFIX)
    rig.connect()
    rig.run_until(lambda: len(rig.chunks()) >= 3)
    first, *later = rig.observations
    # Nothing published yet: the arm stands still, the prefix is its measured state.
    np.testing.assert_allclose(first["action_prefix"][:, :7], 0.1, atol=1e-7)
    assert first["committed_steps"] >= 1
    assert later
    for obs in rig.observations:
        prefix, steps = obs["action_prefix"], obs["committed_steps"]
        assert prefix.dtype == np.float32 and prefix.ndim == 2 and prefix.shape[1] == 32
        assert isinstance(steps, int) and 1 <= steps <= prefix.shape[0] <= H
        np.testing.assert_array_equal(prefix[:, 7:], 0.0)  # π0 padding, like the state


class RecordingRig(CoreRig):
    """A CoreRig that remembers the t_obs of every submitted observation."""

    def __post_init__(self) -> None:
        self.t_obs: list[float] = []
        super().__post_init__()

    def _submit(self, obs: dict[str, Any], tag: Any) -> bool:
        accepted = super()._submit(obs, tag)
        if accepted:
            self.t_obs.append(tag.t_obs)
        return accepted


def test_prefix_rows_are_what_the_controller_follows() -> None:
    rig = RecordingRig(metadata=build_metadata("pi05", action_prefix=True), overrides=PREFIX)
    rig.connect()
    rig.run_until(lambda: len(rig.observations) >= 5)
    dt = 1.0 / 50.0
    chunks = previews(rig)
    checked = 0
    for obs, t_obs in zip(rig.observations[1:], rig.t_obs[1:]):
        _, times, positions = [c for c in chunks if c[0] <= t_obs][-1]
        prefix = obs["action_prefix"]
        for i in (0, obs["committed_steps"] - 1, prefix.shape[0] - 1):
            t = t_obs + i * dt
            if t < times[0]:  # before its first point the command is still moving there
                continue
            # Cubic between points, through the velocities the node publishes.
            velocities = finite_difference_velocities(positions, times)
            expected = hermite_state(times, positions, velocities, t)[0]
            np.testing.assert_allclose(prefix[i, :7], expected, atol=1e-5)
            checked += 1
    assert checked >= 6


def test_a_server_that_honours_the_prefix_makes_chunks_join() -> None:
    # Joints that stand still (follow=False) under a policy that changes its mind by
    # 0.02 rad: without the prefix that is a 1 rad/s step at each switch (within the
    # robot's 2 rad/s, cubic overshoot included, so nothing is refused).
    none = CoreRig(
        policy=disagreeing_policy(honour_prefix=False),
        follow=False,
        overrides={"smoothing": "none"},
    )
    none.connect()
    none.run_until(lambda: len(none.chunks()) >= 6)
    prefix = CoreRig(
        metadata=build_metadata("pi05", action_prefix=True),
        policy=disagreeing_policy(honour_prefix=True),
        overrides=PREFIX,
    )
    prefix.connect()
    prefix.run_until(lambda: len(prefix.chunks()) >= 6)
    # Without the prefix each switch jumps by about the disagreement (0.01 to 0.03 rad) ...
    assert min(boundary_jumps(none)[1:]) > 0.0075
    # ... with it, the new chunk continues the old one (steps are 0.002 rad).
    assert max(boundary_jumps(prefix)) < 0.005


def test_groot_prefix_has_the_flat_action_width() -> None:
    metadata = build_metadata("groot", embodiment=load_embodiment("so100"), action_prefix=True)
    rig = CoreRig(model="groot", metadata=metadata, overrides={"smoothing": "prefix"})
    rig.connect()
    rig.run_until(lambda: len(rig.observations) >= 3)
    prefix = rig.observations[-1]["action_prefix"]
    assert prefix.shape[1] == 6 and prefix.shape[0] >= rig.observations[-1]["committed_steps"]
