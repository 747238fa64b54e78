"""Pure parts of the reference server: synthetic policy, embodiments, config paths, metadata."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from relay_ros.formats.embodiment import EmbodimentError, load_embodiment, load_embodiments
from relay_ros.formats.pi import validate_pi
from relay_ros.formats.requests import (
    ObservationError,
    PublicRequestError,
    check_sampling_params,
)
from relay_ros.paths import ConfigNotFoundError, config_dir, config_file
from relay_ros.server import ServerOptions, hard_size_limit
from relay_ros.server.metadata import build_metadata
from relay_ros.server.synthetic import SyntheticPolicy

REPO_CONFIG = Path(__file__).resolve().parents[1] / "config"


# ------------------------------------------------------------------ synthetic


def test_chunk_starts_at_state_moves_and_stays_in_range() -> None:
    policy = SyntheticPolicy(action_horizon=50, control_hz=50.0)
    state = np.linspace(-0.6, 0.6, 32).astype(np.float32)
    chunk = policy.chunk(state, np.random.default_rng(0), prompt="stack cups")
    assert chunk.shape == (50, 32) and chunk.dtype == np.float32
    assert np.max(np.abs(chunk[0] - state)) < 0.05  # action 0 is almost the state
    assert np.max(np.abs(chunk[-1] - chunk[0])) > 0.2  # the arm visibly moves in 1 s
    assert np.all(np.abs(chunk) <= 0.8)
    # Smooth: no step larger than 0.05 rad between consecutive actions (20 ms apart).
    assert np.max(np.abs(np.diff(chunk, axis=0))) < 0.05


def test_next_chunk_continues_seamlessly() -> None:
    policy = SyntheticPolicy(action_horizon=16, control_hz=30.0)
    state = np.array([0.3, -0.2, 0.1, 0.5, -0.4, 0.0], np.float32)
    first = policy.chunk(state, np.random.default_rng(5))
    # Action i is for t_obs + i*dt: a chunk from action 7 continues the first from there.
    second = policy.chunk(first[7], np.random.default_rng(5))
    np.testing.assert_allclose(second[:9], first[7:], atol=1e-5)


def test_padding_dims_do_not_disturb_the_gripper() -> None:
    # pi0.5: 7 joints (6 arm + gripper at dim 6) zero-padded to 32; the padding stays 0
    # in every observed state, and the gripper must still continue seamlessly.
    policy = SyntheticPolicy(action_horizon=50, control_hz=50.0)
    state = np.zeros(32, np.float32)
    state[:7] = [0.3, -0.2, 0.1, 0.5, -0.4, 0.2, 0.1]
    first = policy.chunk(state, np.random.default_rng(1))
    observed = np.zeros(32, np.float32)
    observed[:7] = first[25, :7]
    second = policy.chunk(observed, np.random.default_rng(1))
    np.testing.assert_allclose(second[:25, :7], first[25:, :7], atol=1e-5)
    assert np.ptp(first[:, 6]) > 0.05  # and the gripper does move


def test_chunks_are_deterministic_given_state_and_seed() -> None:
    policy = SyntheticPolicy(action_horizon=50, control_hz=50.0)
    state = np.full(32, 0.2, np.float32)
    a = policy.chunk(state, np.random.default_rng(3), prompt="p")
    b = policy.chunk(state, np.random.default_rng(3), prompt="p")
    c = policy.chunk(state, np.random.default_rng(4), prompt="p")
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.max(np.abs(a - c)) < 0.1  # randomness only perturbs the flow slightly


def test_a_state_out_of_range_starts_where_it_is_and_comes_back() -> None:
    """Action 0 is the observed state even beyond the +/-0.8 rad range (a dry-run arm at
    3 rad is not told to jump); from there the joints only move back towards it."""
    policy = SyntheticPolicy(action_horizon=20, control_hz=10.0)
    chunk = policy.chunk(np.full(5, 3.0, np.float32), np.random.default_rng(0), action_dim=7)
    assert chunk.shape == (20, 7)
    np.testing.assert_allclose(chunk[0, :5], 3.0, atol=1e-6)
    assert np.all(chunk[:, :5] <= 3.0 + 1e-6) and np.all(np.diff(chunk[:, 2:5], axis=0) <= 1e-6)
    assert chunk[-1, 2:5].max() < 1.0  # relaxing into the range
    assert np.all(np.abs(chunk[:, 5:]) <= 0.8)  # the padded dimensions start at 0
    # Within the range, the range still holds.
    inside = policy.chunk(np.full(7, 0.7, np.float32), np.random.default_rng(0))
    assert np.all(np.abs(inside) <= 0.8)


def test_synthetic_refuses_bad_horizon() -> None:
    with pytest.raises(ValueError, match="action_horizon=0"):
        SyntheticPolicy(action_horizon=0, control_hz=50.0)


# ---------------------------------------------------------------- embodiments


def test_default_embodiment_from_repo_config() -> None:
    emb = load_embodiment()
    assert emb.name == "so100"
    assert emb.video_keys == ("video.front", "video.wrist")
    assert emb.state_keys == {"state.single_arm": 5, "state.gripper": 1}
    assert emb.action_keys == ["action.single_arm", "action.gripper"]
    assert emb.state_dim == 6 and emb.action_dim == 6


def test_embodiment_by_name_and_by_path() -> None:
    assert load_embodiment("bimanual").action_dim == 14
    path = REPO_CONFIG / "groot_embodiments.yaml"
    assert load_embodiment(str(path)).name == "so100"
    assert load_embodiment(f"{path}:bimanual").name == "bimanual"
    with pytest.raises(EmbodimentError, match=r"embodiment 'gr1' is not one of \['bimanual'"):
        load_embodiment("gr1")


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("embodiments: [1, 2]", "has no 'embodiments' map"),
        ("embodiments: {a: {video_keys: [front], state_keys: {state.x: 1}, "
         "action_keys: {action.x: 1}}}", "video_keys is \\['front'\\]"),
        ("embodiments: {a: {video_keys: [video.f], state_keys: {state.x: 0}, "
         "action_keys: {action.x: 1}}}", "width of 'state.x' is 0"),
        ("embodiments: {a: {video_keys: [video.f], state_keys: {state.x: 1}, "
         "action_keys: {x: 1}}}", "key 'x' does not start with 'action.'"),
        ("default: b\nembodiments: {a: {video_keys: [video.f], state_keys: {state.x: 1}, "
         "action_keys: {action.x: 1}}}", "default 'b' is not one of \\['a'\\]"),
        ("embodiments: {a: [", "is not valid YAML"),
    ],
)  # fmt: skip
def test_bad_embodiment_files(tmp_path: Path, body: str, match: str) -> None:
    path = tmp_path / "emb.yaml"
    path.write_text(body)
    with pytest.raises(EmbodimentError, match=match):
        load_embodiments(path)


def test_config_dir_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "groot_embodiments.yaml").write_text(
        "embodiments:\n  mine:\n    video_keys: [video.cam]\n"
        "    state_keys: {state.arm: 2}\n    action_keys: {action.arm: 2}\n"
    )
    monkeypatch.setenv("RELAY_ROS_CONFIG_DIR", str(tmp_path))
    assert config_dir() == tmp_path
    assert config_file("groot_embodiments.yaml") == tmp_path / "groot_embodiments.yaml"
    assert load_embodiment().name == "mine"
    # Files missing from the override fall back to the next candidate directory.
    monkeypatch.setenv("RELAY_ROS_CONFIG_DIR", str(tmp_path / "absent"))
    assert config_dir() == REPO_CONFIG
    with pytest.raises(ConfigNotFoundError, match="'nope.yaml' not found; searched"):
        config_file("nope.yaml")


# ------------------------------------------------------------ options, metadata


def test_server_options_validation() -> None:
    with pytest.raises(ValueError, match=r"model 'pi7' is not one of \['pi05', 'pi0', 'groot'\]"):
        ServerOptions(models=("pi7",))
    with pytest.raises(ValueError, match="latency_ms=-1.0"):
        ServerOptions(latency_ms=-1.0)
    with pytest.raises(ValueError, match="max_message_mib=0"):
        ServerOptions(max_message_mib=0)
    assert ServerOptions().max_message_bytes == 64 * 1024 * 1024
    assert hard_size_limit(64 * 1024 * 1024) == 128 * 1024 * 1024
    assert hard_size_limit(1024) == 1024 + 1024 * 1024


def test_metadata_overrides_keep_server_fields() -> None:
    meta = build_metadata(
        "pi0",
        lora_adapters=["a"],
        direct_url="ws://x/pi0",
        overrides={"action_horizon": 10, "model": "other", "lora_adapters": ["z"]},
    )
    assert meta["action_horizon"] == 10
    assert meta["model"] == "pi0" and meta["lora_adapters"] == ["a"]
    assert meta["direct_url"] == "ws://x/pi0"
    with pytest.raises(ValueError, match="needs an embodiment"):
        build_metadata("groot")


def test_sampling_params_rules() -> None:
    assert check_sampling_params(None, ["a"]) == (None, 1.0)
    assert check_sampling_params({}, ["a"]) == (None, 1.0)
    assert check_sampling_params({"lora": False}, ["a"]) == (None, 1.0)
    assert check_sampling_params({"lora": "a"}, ["a"]) == ("a", 1.0)
    assert check_sampling_params({"lora": {"name": "a", "scale": 2}}, ["a"]) == ("a", 2.0)
    with pytest.raises(PublicRequestError, match=r"^Unknown LoRA adapter 3; this server"):
        check_sampling_params({"lora": 3}, ["a"])


@pytest.mark.filterwarnings("error")
def test_ragged_state_is_refused_alike_on_every_numpy() -> None:
    # NumPy < 1.24 only warned here and built an object array; the detail must not
    # depend on the NumPy version (docs/compat.md).
    obs = {"images": {"cam": np.zeros((4, 4, 3), np.uint8)}, "state": [[0.0, 1.0], [2.0]]}
    with pytest.raises(ObservationError, match=r"^state cannot be read as an array: "):
        validate_pi(
            obs,
            action_dim=2,
            camera_keys=["cam"],
            max_cameras=1,
            needs_session_id=False,
            adapters=[],
        )
