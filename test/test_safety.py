"""Each safety refusal with its exact reason, clamp mode, and limit validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from relay_ros.pipeline.safety import (
    JointLimits,
    Refusal,
    SafetyError,
    check_chunk,
    check_first_step,
    check_fresh,
)

NAMES = ("shoulder", "elbow", None)  # dim 2 is padding, not commanded


def limits() -> JointLimits:
    return JointLimits.from_mapping({"shoulder": (-1.0, 1.0), "elbow": [0.0, 2.0]}, NAMES)


def test_from_mapping_builds_per_dimension_arrays() -> None:
    lim = limits()
    assert lim.size == 3
    assert lim.names == NAMES
    np.testing.assert_array_equal(lim.lower, [-1.0, 0.0, -np.inf])
    np.testing.assert_array_equal(lim.upper, [1.0, 2.0, np.inf])
    with pytest.raises(ValueError):
        lim.lower[0] = 5.0


def test_unbounded_limits() -> None:
    lim = JointLimits.unbounded(["a", "b"])
    assert check_chunk(np.full((2, 2), 1e9), lim).ok


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        (
            {"elbw": (0.0, 1.0)},
            "joint_limits has an entry for 'elbw', which is not a commanded joint; "
            "commanded joints: ['shoulder', 'elbow']",
        ),
        ({"elbow": (1.0, 1.0)}, "joint_limits['elbow'] = (1.0, 1.0) must have lower < upper"),
        ({"elbow": (2.0, 1.0)}, "joint_limits['elbow'] = (2.0, 1.0) must have lower < upper"),
        (
            {"elbow": (math.nan, 1.0)},
            "joint_limits['elbow'] = (nan, 1.0) must be finite numbers [lower, upper]",
        ),
        (
            {"elbow": (0.0, 1.0, 2.0)},
            "joint_limits['elbow'] = (0.0, 1.0, 2.0) must be two numbers [lower, upper]",
        ),
        ({"elbow": "low"}, "joint_limits['elbow'] = 'low' must be two numbers [lower, upper]"),
    ],
)
def test_from_mapping_rejects_bad_limits(mapping: dict[str, object], message: str) -> None:
    with pytest.raises(SafetyError) as info:
        JointLimits.from_mapping(mapping, NAMES)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_direct_construction_validates() -> None:
    with pytest.raises(SafetyError) as info:
        JointLimits(("a",), np.array([np.nan]), np.array([1.0]))
    assert str(info.value) == "limits of joint 'a' (dim 0) contain NaN: (nan, 1.0)"
    with pytest.raises(SafetyError) as info:
        JointLimits(("a", None), np.array([0.0, 0.0]), np.array([1.0]))
    assert str(info.value) == (
        "joint limits have 2 lower and 1 upper values, expected 2 (one per dimension)"
    )


def test_check_chunk_accepts_and_copies() -> None:
    chunk = np.array([[0.5, 1.0, 99.0], [-0.5, 0.0, -99.0]], dtype=np.float32)
    result = check_chunk(chunk, limits(), horizon=2)
    assert result.ok and result.refusal is None and result.clamped == 0 and result.note is None
    assert result.chunk is not None
    assert result.chunk.dtype == np.float64
    np.testing.assert_array_equal(result.chunk, chunk)
    assert result.chunk is not chunk


@pytest.mark.parametrize(
    ("chunk", "reason", "kind"),
    [
        (
            np.zeros(3),
            "action chunk has shape (3,), expected (H, 3) (horizon, action dimensions)",
            "shape",
        ),
        (np.zeros((4, 2)), "action chunk has shape (4, 2), expected (H, 3)", "shape"),
        (np.zeros((0, 3)), "action chunk has no actions (0 rows)", "shape"),
        (
            np.array([["a", "b", "c"]]),
            "action chunk has dtype <U1, expected a real number type",
            "shape",
        ),
        (
            np.array([[0.0, 0.0, 0.0], [0.0, 0.0, np.nan]]),
            "action chunk has a non-finite value nan at step 1, dim 2; refusing the whole chunk",
            "non_finite",
        ),
        (
            np.array([[0.0, np.inf, 0.0], [np.nan, 0.0, 0.0]]),
            "action chunk has a non-finite value inf at step 0, joint 'elbow' (dim 1) "
            "(1 more non-finite values); refusing the whole chunk",
            "non_finite",
        ),
        (
            np.array([[0.0, 1.0, 0.0], [0.0, 2.25, 0.0]]),
            "joint 'elbow' (dim 1) is 2.2500 at step 1, above its upper limit 2.0000; "
            "refusing the chunk (limits_mode=refuse)",
            "limits",
        ),
        (
            np.array([[-1.5, 1.0, 0.0], [0.0, 2.25, 0.0], [-1.1, -0.1, 0.0]]),
            "joint 'shoulder' (dim 0) is -1.5000 at step 0, below its lower limit -1.0000 "
            "(3 more values outside the limits); refusing the chunk (limits_mode=refuse)",
            "limits",
        ),
    ],
)
def test_check_chunk_refusals(chunk: np.ndarray, reason: str, kind: str) -> None:
    result = check_chunk(chunk, limits())
    assert not result.ok
    assert result.chunk is None
    assert result.refusal == Refusal(reason, kind)


def test_check_chunk_wrong_horizon() -> None:
    result = check_chunk(np.zeros((4, 3)), limits(), horizon=50)
    assert result.refusal == Refusal("action chunk has shape (4, 3), expected (50, 3)", "shape")


def test_clamp_mode_clamps_into_limits_and_says_so() -> None:
    chunk = np.array([[-1.5, 1.0, 50.0], [0.0, 2.25, 0.0]])
    result = check_chunk(chunk, limits(), mode="clamp")
    assert result.ok
    assert result.chunk is not None
    np.testing.assert_array_equal(result.chunk, [[-1.0, 1.0, 50.0], [0.0, 2.0, 0.0]])
    assert result.clamped == 2
    assert result.note == (
        "clamped 2 value(s) into joint limits; largest: joint 'shoulder' (dim 0) is -1.5000 "
        "at step 0, below its lower limit -1.0000"
    )
    np.testing.assert_array_equal(chunk[0], [-1.5, 1.0, 50.0])  # input untouched


def test_clamp_mode_still_refuses_nan() -> None:
    result = check_chunk(np.array([[np.nan, 0.0, 0.0]]), limits(), mode="clamp")
    assert result.refusal is not None and result.refusal.kind == "non_finite"


def test_unknown_mode_is_an_error() -> None:
    with pytest.raises(SafetyError) as info:
        check_chunk(np.zeros((1, 3)), limits(), mode="ignore")  # type: ignore[arg-type]
    assert str(info.value) == "limits mode 'ignore' is not one of ['refuse', 'clamp']"


def test_first_step_within_limit() -> None:
    assert check_first_step([0.0, 1.0], [0.1, 0.8], 0.25, ["a", "b"]) is None
    assert check_first_step([0.0, 1.0], [5.0, 0.8], math.inf, ["a", "b"]) is None


def test_first_step_jump_is_refused_with_largest_violation() -> None:
    refusal = check_first_step(
        np.array([0.0, 1.0, 0.0]), np.array([0.3, 1.9, 0.0]), 0.25, ["a", "elbow", "c"]
    )
    assert refusal == Refusal(
        "first point moves joint 'elbow' by 0.9000 (from 1.0000 to 1.9000), more than "
        "max_joint_step 0.2500; refusing the trajectory",
        "jump",
    )


def test_first_step_per_joint_limits() -> None:
    refusal = check_first_step([0.0, 0.0], [0.3, 0.3], [0.5, 0.1], ["a", "gripper"])
    assert refusal is not None
    assert refusal.reason == (
        "first point moves joint 'gripper' by 0.3000 (from 0.0000 to 0.3000), more than "
        "max_joint_step 0.1000; refusing the trajectory"
    )


def test_first_step_non_finite_inputs() -> None:
    assert check_first_step([0.0, np.nan], [0.0, 0.0], 0.5, ["a", "b"]) == Refusal(
        "current state of joint 'b' is nan, cannot check the first step", "jump"
    )
    assert check_first_step([0.0, 0.0], [np.inf, 0.0], 0.5, ["a", "b"]) == Refusal(
        "first point of joint 'a' is inf; refusing the trajectory", "non_finite"
    )


def test_first_step_argument_errors() -> None:
    with pytest.raises(SafetyError) as info:
        check_first_step([0.0], [0.0, 1.0], 0.5, ["a"])
    assert str(info.value) == (
        "check_first_step got 1 state values, 2 point values and 1 joint names; "
        "expected the same number of each"
    )
    with pytest.raises(SafetyError) as info:
        check_first_step([0.0], [0.0], 0.0, ["a"])
    assert str(info.value) == "max_joint_step 0.0 must be a number > 0 or one per joint (1 joints)"


def test_fresh_inputs_pass() -> None:
    stamps = {"camera 'base_0_rgb'": 9.8, "joint states": 9.95, "future": 10.2}
    assert check_fresh(stamps, 10.0, 0.5) is None


def test_stale_input_named_with_age() -> None:
    refusal = check_fresh({"camera 'wrist'": 9.27, "joint states": 9.99}, 10.0, 0.5)
    assert refusal == Refusal(
        "stale input: \"camera 'wrist'\" is 0.730 s old (sensor_timeout_s = 0.500 s)", "stale"
    )


def test_several_stale_inputs_oldest_first() -> None:
    refusal = check_fresh({"base": 9.4, "wrist": 8.0, "joint_states": 9.9}, 10.0, 0.5)
    assert refusal is not None
    assert refusal.reason == (
        "stale inputs: 'wrist' is 2.000 s old, 'base' is 0.600 s old (sensor_timeout_s = 0.500 s)"
    )


def test_missing_input() -> None:
    refusal = check_fresh({"base": None, "joint_states": 9.9, "wrist": None}, 10.0, 0.5)
    assert refusal == Refusal("no message received yet on 'base', 'wrist'", "stale")


def test_fresh_timeout_must_be_positive() -> None:
    with pytest.raises(SafetyError) as info:
        check_fresh({}, 0.0, 0.0)
    assert str(info.value) == "sensor timeout 0.0 s must be a number > 0"
