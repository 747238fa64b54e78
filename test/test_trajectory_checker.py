"""The velocity checker (test/trajectory_checker.py) on inputs with a known answer.

One joint with a 1 rad/s limit. A trajectory from rest to rest over ``T`` s of
distance ``d`` is a cubic whose top speed is ``1.5 * d / T``: exactly at the limit
for ``d = 1, T = 1.5``, 10 % over for ``T = 1.5 / 1.1``. Delayed delivery, for a
controller that starts from the measured state (no ``interpolate_from_desired_state``):
an arm following that motion is read
half a second after the stamp of the next trajectory, which continues it exactly;
compared with the command at the time it was read, it follows (ratio 1.000), whereas
compared with the command at the stamp (the old rule) it would seem 0.48 rad ahead and
the trajectory would read 35 times the limit. From the desired state, where the arm
was measured does not matter. Then: the conftest hook reports a checker over the
limit beside a failure of another kind, and fails a test that otherwise passed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from trajectory_checker import VelocityChecker

pytest_plugins = ["pytester"]

T = 1.5  # the first motion: 0 -> 1 rad from rest to rest, top speed 1.0 rad/s at 0.75 s


def motion(t: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Position and velocity of the rest-to-rest cubic 0 -> 1 over T at time t."""
    s = np.clip(np.asarray(t, dtype=np.float64) / T, 0.0, 1.0)
    return 3 * s**2 - 2 * s**3, (6 * s - 6 * s**2) / T


class Arm:
    """A measured arm: its position and the time it was read."""

    def __init__(self) -> None:
        self.position = 0.0
        self.time = 0.0

    def __call__(self) -> tuple[dict[str, float], float]:
        return {"a": self.position}, self.time


def _checker(arm: Arm, *, from_desired_state: bool = False) -> VelocityChecker:
    """A JTC without interpolate_from_desired_state by default: it starts a trajectory
    from the measured state (the command shifted by the arm's tracking offset)."""
    return VelocityChecker(
        {"a": 1.0},
        arm,
        name="known answers",
        judged=False,
        from_desired_state=from_desired_state,
    )


def _add(checker: VelocityChecker, stamp: float, tfs, positions, velocities) -> None:
    checker.add(
        "/arm",
        ["a"],
        stamp,
        np.asarray(tfs, dtype=np.float64),
        np.asarray(positions, dtype=np.float64).reshape(-1, 1),
        np.asarray(velocities, dtype=np.float64).reshape(-1, 1),
    )


@pytest.mark.parametrize(("duration", "ratio"), [(T, 1.0), (T / 1.1, 1.1), (2 * T, 0.5)])
def test_rest_to_rest_motion_reads_its_top_speed(duration: float, ratio: float) -> None:
    checker = _checker(Arm())
    _add(checker, 0.0, [duration], [1.0], [0.0])
    assert checker.worst_ratio == pytest.approx(ratio, abs=1e-12)
    assert checker.over == (ratio > 1.0)
    if checker.over:
        assert checker.worst == (
            "/arm: joint 'a' at 1.100/s on segment 0 of the trajectory stamped 0.000 "
            "(limit 1.000/s)"
        )


def _continuation(stamp: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rest of the first motion from ``stamp``, sampled every 20 ms with its exact
    velocities (cubic Hermite segments through them are that cubic again)."""
    tfs = np.arange(1, int(round((T - stamp) / 0.02)) + 1) * 0.02
    positions, velocities = motion(stamp + tfs)
    return tfs, positions, velocities


@pytest.mark.parametrize("read_late_s", [0.0, 0.1, 0.5, 0.9])
def test_a_following_arm_read_late_is_compared_at_the_time_it_was_read(
    read_late_s: float,
) -> None:
    arm = Arm()
    checker = _checker(arm)
    _add(checker, 0.0, [T], [1.0], [0.0])
    # The next trajectory, stamped 0.5 s, continues the motion; the arm has followed
    # and is read read_late_s after the stamp.
    arm.time = 0.5 + read_late_s
    arm.position = float(motion(arm.time)[0])
    _add(checker, 0.5, *_continuation(0.5))
    assert checker.worst_ratio == pytest.approx(1.0, abs=1e-9)
    assert not checker.over


def test_comparing_at_the_wrong_time_reads_a_correct_trajectory_far_over_the_limit() -> None:
    """What the instrument read before: the arm's state taken 0.5 s late, compared with
    the command at the stamp. Reproduced by saying it was read at the stamp: it seems
    0.48 rad ahead of the command, and the correct continuation reads 35 times the
    limit."""
    arm = Arm()
    checker = _checker(arm)
    _add(checker, 0.0, [T], [1.0], [0.0])
    arm.time = 0.5  # said to be read at the stamp, but where the arm was at 1.0 s
    arm.position = float(motion(1.0)[0])
    _add(checker, 0.5, *_continuation(0.5))
    assert checker.worst_ratio == pytest.approx(35.21, abs=0.01)


def test_from_the_desired_state_the_measured_arm_does_not_matter() -> None:
    """interpolate_from_desired_state: the controller starts from its command, wherever
    the arm was measured (late, stuck): the continuation reads its own top speed."""
    for time, position in ((1.0, float(motion(1.0)[0])), (1.0, 0.0), (0.5, 5.0)):
        arm = Arm()
        checker = _checker(arm, from_desired_state=True)
        _add(checker, 0.0, [T], [1.0], [0.0])
        arm.time, arm.position = time, position
        _add(checker, 0.5, *_continuation(0.5))
        assert checker.worst_ratio == pytest.approx(1.0, abs=1e-9)


def test_an_arm_that_did_not_follow_starts_from_where_it_is() -> None:
    """Read at its time and 0.74 rad behind the command then (a stuck joint): without
    interpolate_from_desired_state the controller starts the next trajectory from the
    command shifted by that offset, at the commanded velocity."""
    arm = Arm()
    checker = _checker(arm)
    _add(checker, 0.0, [T], [1.0], [0.0])
    arm.time = 1.0  # it stood at 0 (a stuck joint)
    _add(checker, 0.5, *_continuation(0.5))
    # From 0.26 - 0.74 = -0.48 rad at 0.5 s (at 0.889 rad/s) to the first point, 0.27
    # rad 20 ms later.
    assert checker.over and checker.worst_ratio > 10


_CHECKER_DIR = Path(__file__).parent

_PLUGIN_TEST = """
import numpy as np
from trajectory_checker import VelocityChecker


def _over_the_limit():
    checker = VelocityChecker({"a": 1.0}, lambda: ({"a": 0.0}, 0.0), name="probe")
    checker.add("/arm", ["a"], 0.0, np.array([0.5]), np.array([[1.0]]), np.array([[0.0]]))


def test_fails_for_another_reason():
    _over_the_limit()
    assert 1 == 2, "another failure"


def test_passes_otherwise():
    _over_the_limit()


def test_within():
    checker = VelocityChecker({"a": 1.0}, lambda: ({"a": 0.0}, 0.0), name="probe")
    checker.add("/arm", ["a"], 0.0, np.array([3.0]), np.array([[1.0]]), np.array([[0.0]]))
"""


def test_the_conftest_hook_reports_a_checker_over_the_limit_passed_or_failed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(_CHECKER_DIR))
    pytester.makeconftest((_CHECKER_DIR / "conftest.py").read_text())
    pytester.makepyfile(test_probe=_PLUGIN_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    line = (
        "velocity checker probe: /arm: joint 'a' at 3.000/s on segment 0 of the trajectory "
        "stamped 0.000 (limit 1.000/s) (3.000 x the limit)"
    )
    # The test that failed for another reason shows the checker's verdict beside it.
    failed_section = out[out.index("another failure") : out.index("test_passes_otherwise ___")]
    assert line in failed_section
    # The test that passed otherwise fails with it (its own section; the short summary
    # may repeat the message, as wide as the terminal lets it).
    passed_section = out[out.index("test_passes_otherwise ___") : out.index("short test summary")]
    assert "a trajectory to a controller exceeded a velocity limit:" in passed_section
    assert line in passed_section, out
