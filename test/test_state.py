"""JointStateCache: subsets and order, missing/stale/NaN errors, real JointState messages."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

try:
    from sensor_msgs.msg import JointState
except ImportError:  # the ROS-free compat venvs (docs/compat.md): same fields, plain object

    class JointState:  # type: ignore[no-redef]
        def __init__(self) -> None:
            self.name: list[str] = []
            self.position: list[float] = []


from relay_ros.pipeline.state import (
    MAX_TRANSPORT_S,
    TRUST_AFTER_SAMPLES,
    UNTRUSTED_FOR_S,
    DuplicateJointError,
    ImplausibleJointError,
    JointStateCache,
    JointStateError,
    MissingJointsError,
    NonFiniteStateError,
    StaleInputError,
)

ARM = ["j1", "j2", "j3"]


def joint_state(names, positions) -> JointState:
    msg = JointState()
    msg.name = list(names)
    msg.position = [float(p) for p in positions]
    return msg


def feed(cache: JointStateCache, msg: JointState, stamp: float) -> int:
    return cache.update(msg.name, msg.position, stamp)


def test_configured_order_from_several_messages():
    cache = JointStateCache(ARM + ["gripper"])
    # Arm driver publishes in its own order plus an unconfigured joint; gripper separately.
    assert feed(cache, joint_state(["j3", "extra", "j1", "j2"], [3.0, 9.0, 1.0, 2.0]), 10.0) == 3
    assert feed(cache, joint_state(["gripper"], [0.04]), 10.05) == 1
    vector = cache.vector(now=10.1, timeout_s=0.5)
    assert vector.dtype == np.float64
    np.testing.assert_array_equal(vector, [1.0, 2.0, 3.0, 0.04])
    assert cache.joint_names == ("j1", "j2", "j3", "gripper")


def test_latest_value_wins_and_old_messages_do_not_overwrite():
    cache = JointStateCache(["a"])
    cache.update(["a"], [1.0], 5.0)
    cache.update(["a"], [2.0], 6.0)
    cache.update(["a"], [0.5], 5.5)  # reordered delivery of an older message
    assert cache.vector(6.0, 1.0).tolist() == [2.0]


def test_missing_joints_listed():
    cache = JointStateCache(ARM + ["gripper"])
    cache.update(["j2"], [0.0], 1.0)
    with pytest.raises(MissingJointsError) as info:
        cache.vector(1.0, 1.0)
    assert info.value.missing == ("j1", "j3", "gripper")
    assert str(info.value) == "no joint state received yet for joints ['j1', 'j3', 'gripper']"


def test_stale_joint_named_with_age():
    cache = JointStateCache(ARM)
    cache.update(ARM, [0.0, 0.0, 0.0], 1.0)
    cache.update(["j1", "j3"], [0.1, 0.3], 1.4)
    assert cache.vector(1.2, 0.25).tolist() == [0.1, 0.0, 0.3]
    with pytest.raises(StaleInputError) as info:
        cache.vector(now=1.5, timeout_s=0.25)
    assert (info.value.kind, info.value.name, info.value.timeout_s) == ("joint", "j2", 0.25)
    assert math.isclose(info.value.age_s, 0.5)
    assert str(info.value) == (
        "joint 'j2' is stale: latest value is 0.500 s old, older than sensor_timeout_s=0.25"
    )


def test_nan_and_inf_refused():
    cache = JointStateCache(ARM)
    cache.update(ARM, [0.0, math.nan, math.inf], 1.0)
    with pytest.raises(NonFiniteStateError) as info:
        cache.vector(1.0, 1.0)
    assert info.value.joints == ("j2", "j3")
    assert str(info.value) == "joint positions are not finite: {'j2': nan, 'j3': inf}"
    cache.update(["j2", "j3"], [0.2, 0.3], 1.1)
    assert cache.vector(1.1, 1.0).tolist() == [0.0, 0.2, 0.3]


def test_malformed_message_and_config():
    cache = JointStateCache(ARM)
    msg = JointState()
    msg.name = ["j1", "j2"]
    msg.velocity = [0.0, 0.0]  # positions left empty by a velocity-only driver
    with pytest.raises(JointStateError) as info:
        feed(cache, msg, 1.0)
    assert str(info.value) == (
        "JointState has 2 names but 0 positions; expected one position per name"
    )
    with pytest.raises(JointStateError, match=r"^joint_names is empty"):
        JointStateCache([])
    with pytest.raises(JointStateError) as info:
        JointStateCache(["a", "b", "a"])
    assert str(info.value) == "joint_names lists ['a'] more than once"
    with pytest.raises(JointStateError, match="joint name '' must be a non-empty string"):
        JointStateCache(["a", ""])


def test_a_joint_named_twice_refuses_the_message_until_a_clean_one_comes():
    """Issue 21: joint1 at 0.1 and again at 1.5 in one message was used silently."""
    cache = JointStateCache(ARM)
    feed(cache, joint_state(ARM, [0.0, 0.0, 0.0]), 1.0)
    with pytest.raises(DuplicateJointError) as info:
        feed(cache, joint_state(["j1", "j2", "j1", "j3"], [0.1, 0.2, 1.5, 0.3]), 2.0)
    assert str(info.value) == (
        "a JointState message names 'j1' twice (at 0.1, 1.5); refusing the message (each "
        "joint must appear once)"
    )
    assert info.value.joints == ("j1",) and info.value.positions == ((0.1, 1.5),)
    # Nothing of the message was used, and the state is not known until a clean message:
    # the node holds instead of starting a chunk from either value.
    with pytest.raises(DuplicateJointError):
        cache.vector(2.0, 5.0)
    feed(cache, joint_state(["j2", "j3"], [0.2, 0.3]), 2.1)
    with pytest.raises(DuplicateJointError):
        cache.vector(2.1, 5.0)  # j1 still unknown
    feed(cache, joint_state(["j1"], [0.1]), 2.2)
    np.testing.assert_array_equal(cache.vector(2.2, 5.0), [0.1, 0.2, 0.3])
    # A repeated joint the node does not use still makes the message malformed.
    with pytest.raises(DuplicateJointError, match="'caster' 3 times"):
        feed(cache, joint_state(["caster", "caster", "caster", "j1"], [0, 1, 2, 9.0]), 3.0)
    np.testing.assert_array_equal(cache.vector(3.0, 5.0), [0.1, 0.2, 0.3])  # j1 not taken


def test_reset_forgets_everything():
    cache = JointStateCache(["a"])
    cache.update(["a"], [1.0], 1.0)
    cache.reset()
    with pytest.raises(MissingJointsError):
        cache.vector(1.0, 1.0)
    cache.update(["a"], [3.0], 0.5)  # an earlier stamp is accepted after a reset
    assert cache.vector(0.5, 1.0).tolist() == [3.0]


def test_vector_is_a_copy_and_updates_are_thread_safe():
    cache = JointStateCache(["a", "b"])
    cache.update(["a", "b"], [1.0, 1.0], 0.0)
    vector = cache.vector(0.0, 1.0)
    vector[:] = 99.0
    assert cache.vector(0.0, 1.0).tolist() == [1.0, 1.0]

    def writer(start: int) -> None:
        for i in range(start, start + 2000):
            cache.update(["a", "b"], [float(i), float(i)], float(i))

    threads = [threading.Thread(target=writer, args=(k * 2000,)) for k in range(3)]
    for thread in threads:
        thread.start()
    for _ in range(200):
        a, b = cache.vector(1e9, 2e9)
        assert a == b  # both joints of one message, never torn
    for thread in threads:
        thread.join()
    assert cache.vector(6000.0, 10.0).tolist() == [5999.0, 5999.0]


def test_measured_at_takes_a_plausible_header_stamp_else_the_reception_time() -> None:
    cache = JointStateCache(["a", "b"])
    assert cache.measured_at(["a"]) == -math.inf
    cache.update(["a", "b"], [0.0, 0.0], 10.0, measured_at=9.93)  # 70 ms in transport
    assert cache.measured_at(["a", "b"]) == pytest.approx(9.93)
    cache.update(["a"], [0.1], 11.0, measured_at=0.0)  # a driver that leaves it zero
    assert cache.measured_at(["a"]) == 11.0
    cache.update(["a"], [0.2], 12.0, measured_at=12.5)  # another clock, ahead
    assert cache.measured_at(["a"]) == 12.0
    cache.update(["a"], [0.3], 13.0, measured_at=13.0 - MAX_TRANSPORT_S - 0.1)  # too old
    assert cache.measured_at(["a"]) == 13.0
    assert cache.measured_at(["a", "b"]) == pytest.approx(9.93)  # the oldest of the two


# ------------------------------------------------------------------ implausible samples


def _judged(vmax: float = 2.5, continuous: tuple[str, ...] = ()) -> JointStateCache:
    cache = JointStateCache(["j1", "j2"])
    cache.set_velocity_limits({"j1": vmax, "j2": vmax}, continuous)
    return cache


def test_a_sample_far_beyond_the_velocity_limit_is_rejected_and_named():
    cache = _judged()
    cache.update(["j1", "j2"], [0.0, 0.5], 1.00)
    # 0.6 rad in 10 ms: 60 rad/s against 2.5 (allowed: 2.5 * (3 * 0.01 + 0.02) = 0.125).
    cache.update(["j1", "j2"], [0.0, 1.1], 1.01)
    assert cache.rejected_samples == 1
    assert cache.last_rejection == (
        "joint 'j2' sample 1.1000 is 0.6000 from its last accepted 0.5000, 0.010 s earlier "
        "(60.0/s; more than 3 x its velocity limit 2.5/s): rejected"
    )
    with pytest.raises(ImplausibleJointError) as info:
        cache.vector(now=1.02, timeout_s=0.5)
    assert info.value.joint == "j2"
    assert str(info.value).startswith(
        f"joint 'j2' is not trusted until {TRUST_AFTER_SAMPLES} samples in a row and "
        f"{UNTRUSTED_FOR_S:g} s pass without a rejected one (the last 0.010 s ago: joint 'j2' "
        "sample 1.1000"
    )
    # j1 of the same message was taken; j2 keeps its last accepted value. Trusted again
    # after 10 good samples in a row and 0.25 s, not before.
    for k in range(1, TRUST_AFTER_SAMPLES + 1):
        t = 1.01 + k * 0.01
        cache.update(["j1", "j2"], [0.0, 0.5], t)
        if k < TRUST_AFTER_SAMPLES:
            with pytest.raises(ImplausibleJointError):
                cache.vector(now=t + UNTRUSTED_FOR_S, timeout_s=0.5)
    with pytest.raises(ImplausibleJointError):
        cache.vector(now=1.01 + UNTRUSTED_FOR_S - 0.001, timeout_s=0.5)
    t = 1.01 + UNTRUSTED_FOR_S
    np.testing.assert_array_equal(cache.vector(now=t, timeout_s=0.5), [0.0, 0.5])


@pytest.mark.parametrize("period", [0.01, 0.05])
def test_a_glitch_alternating_around_the_true_value_is_never_trusted(period: float):
    """Every sample is 0.3 off, alternately up and down: whichever is kept is wrong, so
    the joint stays untrusted while it lasts, also when the samples come 50 ms apart.
    (Samples further apart than (0.6 / 2.5 - 0.02) / 3 = 73 ms could be real motion.)"""
    cache = _judged()
    for k in range(100):
        t = 1.0 + period * k
        cache.update(["j1", "j2"], [0.0, 0.2 + (0.3 if k % 2 else -0.3)], t)
        if k:
            with pytest.raises(ImplausibleJointError):
                cache.vector(now=t + period, timeout_s=1.0)
    assert cache.rejected_samples == 50


def test_motion_at_the_limit_passes_at_any_sampling():
    """A joint really moving at its velocity limit: at 1 kHz, 100 Hz, 20 Hz, and with
    samples received in bursts (no header stamps), nothing is rejected."""
    for period in (0.001, 0.01, 0.05):
        cache = _judged()
        for k in range(200):
            t = k * period
            cache.update(["j1", "j2"], [2.5 * t, -2.5 * t], 10.0 + t)
        assert cache.rejected_samples == 0, period
    cache = _judged()
    t = 0.0
    for burst in range(20):  # 5 samples 10 ms apart at the limit, received at once
        for _ in range(5):
            t += 0.01
            cache.update(["j1", "j2"], [2.5 * t, 0.0], 10.0 + 0.05 * burst)
    assert cache.rejected_samples == 0


def test_header_stamps_time_the_check_when_both_samples_have_one():
    """Samples measured 10 ms apart at the limit but received 50 ms apart, then at once:
    their own stamps say how fast the joint moved."""
    cache = _judged()
    cache.update(["j1"], [0.0], 1.00, measured_at=0.95)
    # Received 0.5 ms later but measured 10 ms later, 0.025 rad on: at the limit.
    cache.update(["j1"], [0.025], 1.0005, measured_at=0.96)
    assert cache.rejected_samples == 0
    # Measured 1 ms later, 0.2 rad on (200 rad/s): rejected though received 50 ms later.
    cache.update(["j1"], [0.225], 1.05, measured_at=0.961)
    assert cache.rejected_samples == 1


def test_the_first_sample_and_one_after_a_gap_or_reset_are_taken_but_not_trusted_alone():
    cache = _judged()
    cache.update(["j1", "j2"], [3.0, -3.0], 1.0)  # first: nothing to compare with
    cache.update(["j1"], [1.0], 2.0)  # 2 rad in 1 s: within 3 x 2.5 rad/s
    assert cache.rejected_samples == 0
    cache.reset()  # e.g. a clock jump: the next sample starts afresh
    cache.update(["j1", "j2"], [-3.0, 3.0], 2.001)
    assert cache.rejected_samples == 0
    # A lone sample could be a glitch: trusted after TRUST_AFTER_SAMPLES in a row.
    with pytest.raises(ImplausibleJointError) as info:
        cache.vector(now=2.001, timeout_s=0.5)
    assert str(info.value) == (
        f"joint 'j1' is not trusted yet: 1 of {TRUST_AFTER_SAMPLES} samples in a row so far "
        "(a lone sample cannot be told from a glitch)"
    )
    for k in range(1, TRUST_AFTER_SAMPLES):
        cache.update(["j1", "j2"], [-3.0, 3.0], 2.001 + 0.01 * k)
    np.testing.assert_array_equal(cache.vector(now=2.1, timeout_s=0.5), [-3.0, 3.0])


def test_a_continuous_joint_may_wrap_a_full_turn():
    cache = _judged(continuous=("j1",))
    cache.update(["j1", "j2"], [math.pi - 0.01, math.pi - 0.01], 1.0)
    cache.update(["j1", "j2"], [-math.pi + 0.01, -math.pi + 0.01], 1.01)
    assert cache.rejected_samples == 1  # j2 is not continuous: a 6.26 rad jump
    assert cache.last_rejection is not None and "'j2'" in cache.last_rejection


def test_joints_without_limits_and_non_finite_values_are_not_judged():
    cache = JointStateCache(["j1", "j2"])
    cache.set_velocity_limits({"j1": 1.0})
    cache.update(["j1", "j2"], [0.0, 0.0], 1.0)
    cache.update(["j1", "j2"], [float("nan"), 100.0], 1.01)
    assert cache.rejected_samples == 0
    with pytest.raises(NonFiniteStateError):
        cache.vector(now=1.01, timeout_s=0.5)
