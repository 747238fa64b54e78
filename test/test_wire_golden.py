"""The seeds' π and GR00T observations, metadata and chunks, pinned to their bytes.

Each wire format lives in its own module (relay_ros/formats/); moving code between
modules must not change one byte a server receives. The digests below were taken
from the code before the formats package existed; a deliberate change of the wire
updates them in the same commit, with the reason.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from relay_ros.formats.embodiment import load_embodiment
from relay_ros.pipeline.observation import ObservationBuilder, reply_to_chunk
from relay_ros.pipeline.server_spec import ServerSpec
from relay_ros.server.metadata import build_metadata
from relay_ros.wire.codec import packb


def _digest(value: object) -> str:
    return hashlib.sha256(packb(value)).hexdigest()[:16]


def _frames(keys: list[str]) -> dict[str, np.ndarray]:
    # Already at the servers' image_size: no resize (its filter is pinned elsewhere).
    rng = np.random.default_rng(7)
    return {key: rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for key in keys}


def _observation(model: str, keys: list[str], *, jpeg: bool = False) -> dict:
    embodiment = load_embodiment(None) if model == "groot" else None
    spec = ServerSpec.from_metadata(
        build_metadata(model, embodiment=embodiment, needs_session_id=True), model=model
    )
    builder = ObservationBuilder(spec, camera_keys=keys, state_joints=[f"j{i}" for i in range(6)])
    frames: dict = _frames(keys)
    if jpeg:
        # JPEG bytes pass through as they are (fixed bytes: no encoder version in the digest).
        frames = {k: b"\xff\xd8\xff\xe0" + k.encode() for k in frames}
    return builder.build(
        frames,
        np.linspace(-1.0, 1.0, 6),
        "pick up the red block",
        session_id="episode-1",
        seed=3,
        sampling_params={"lora": {"name": "so100_towels", "scale": 0.5}},
        observation_time=12.5,
    )


GOLDEN = {
    "pi05 raw": ("pi05", ["base_0_rgb", "left_wrist_0_rgb"], False),
    "pi0 jpeg": ("pi0", ["base_0_rgb", "right_wrist_0_rgb"], True),
    "groot": ("groot", ["video.front", "video.wrist"], False),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_observation_bytes_are_unchanged(name: str) -> None:
    model, keys, jpeg = GOLDEN[name]
    digest = _digest(_observation(model, keys, jpeg=jpeg))
    assert digest == EXPECTED_OBSERVATIONS[name], f"{name}: {digest}"


@pytest.mark.parametrize("model", ["pi05", "pi0", "groot"])
def test_reference_metadata_is_unchanged(model: str) -> None:
    embodiment = load_embodiment("bimanual") if model == "groot" else None
    meta = build_metadata(model, embodiment=embodiment, lora_adapters=["a", "b"])
    assert _digest(meta) == EXPECTED_METADATA[model], f"{model}: {_digest(meta)}"


def test_replies_become_the_same_chunks() -> None:
    pi = ServerSpec.from_metadata(build_metadata("pi05"), model="pi05")
    actions = np.arange(50 * 32, dtype=np.float32).reshape(50, 32) / 100
    assert np.array_equal(reply_to_chunk({"actions": actions}, pi), actions)
    groot = ServerSpec.from_metadata(
        build_metadata("groot", embodiment=load_embodiment(None)), model="groot"
    )
    arm = np.arange(16 * 5, dtype=np.float32).reshape(1, 16, 5)
    grip = np.arange(16, dtype=np.float32).reshape(1, 16, 1) + 100
    chunk = reply_to_chunk({"action.gripper": grip, "action.single_arm": arm}, groot)
    assert np.array_equal(chunk, np.concatenate([arm[0], grip[0]], axis=1))


EXPECTED_OBSERVATIONS = {
    "groot": "92e8c6f6a17b1392",
    "pi0 jpeg": "d8649acd65a123b2",
    "pi05 raw": "043c9ce3befc2806",
}
EXPECTED_METADATA = {
    "groot": "8daa911738bc1e1e",
    "pi0": "adf2533675bd9141",
    "pi05": "60668d1b15c9cebe",
}
