"""Robot state from ``sensor_msgs/JointState`` messages, in the configured joint order.

Drivers often publish joints in several messages (arm and gripper separately) and in
any order, so :class:`JointStateCache` keeps the latest position of every configured
joint with the time it was valid, and :meth:`JointStateCache.vector` assembles the
state vector only when every joint is known, fresh and finite. Otherwise it raises,
so the node takes no observation and can say exactly which joint is at fault.

It also keeps a short history of each joint (the last ``HISTORY_LENGTH`` values), so
that :meth:`JointStateCache.vector_at` can give the state at an earlier time, linearly
interpolated: the time a camera frame arrived, so that an observation's state and
frames show the same moment while the arm moves.

**Implausible samples** (:meth:`JointStateCache.set_velocity_limits`): an encoder or
bus glitch can report a joint far from where it is. A sample that would mean moving
faster than :data:`IMPLAUSIBLE_SPEED_FACTOR` (3) times the joint's velocity limit since
its last accepted sample is rejected (counted in ``rejected_samples``, the sentence in
``last_rejection``). The allowance is ``max_velocity * (3 * dt + TIMING_SLACK_S)``:
``dt`` between the two samples' header stamps when both are plausible (the driver's
measurement times), else between their reception times, which a loaded machine can
bunch together, hence the slack of 20 ms at the limit. A joint without limits, a
joint's first sample (nothing to compare with; also after :meth:`reset`, e.g. a clock
jump), and a non-finite value (refused later by :meth:`vector`) are not judged; the
allowance grows with the time since the last accepted sample, so after a gap the arm
may have moved that much. A joint without position limits (continuous) may also
wrap by a full turn. Which of two inconsistent samples is wrong cannot be told (a
glitch alternating around the true value leaves every sample wrong), and a first
sample cannot be judged at all, so a judged joint is trusted only once
:data:`TRUST_AFTER_SAMPLES` of its samples in a row were accepted (from its first, a
reset or a rejection) and :data:`UNTRUSTED_FOR_S` seconds passed since its last
rejection: meanwhile :meth:`vector` raises :class:`ImplausibleJointError`, the node
takes no observation from it and holds. (Counting samples, not only time, keeps a
glitch that goes on untrusted when samples come late and far apart on a loaded
machine; 10 samples are 0.1 s at 100 Hz.)

All times are float seconds on one clock (the node's ROS clock, so sim time works).
Thread-safe: ``update`` runs in a subscription callback, ``vector`` in the timer.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "HISTORY_LENGTH",
    "IMPLAUSIBLE_SPEED_FACTOR",
    "TIMING_SLACK_S",
    "TRUST_AFTER_SAMPLES",
    "UNTRUSTED_FOR_S",
    "DuplicateJointError",
    "ImplausibleJointError",
    "JointStateCache",
    "JointStateError",
    "MissingJointsError",
    "NonFiniteStateError",
    "StaleInputError",
]

logger = logging.getLogger(__name__)

#: Values kept per joint for :meth:`JointStateCache.vector_at`: 1 s at 1 kHz, 10 s at
#: 100 Hz (an observation's frames are at most ``sensor_timeout_s`` old).
HISTORY_LENGTH = 1000

#: A sample implying more than this many times the joint's velocity limit is rejected.
IMPLAUSIBLE_SPEED_FACTOR = 3.0
#: Timing slack of that check, seconds at the velocity limit (reception times bunch).
TIMING_SLACK_S = 0.02
#: A joint is not trusted for this long after one of its samples was rejected, seconds,
UNTRUSTED_FOR_S = 0.25
#: ... and until this many of its samples in a row were accepted.
TRUST_AFTER_SAMPLES = 10


class JointStateError(ValueError):
    """Base class: the state vector cannot be assembled (or a message is malformed)."""


class MissingJointsError(JointStateError):
    """Configured joints have never been received.

    Attributes:
        missing: The missing joint names, in configured order.
    """

    def __init__(self, missing: Sequence[str]) -> None:
        self.missing: tuple[str, ...] = tuple(missing)
        super().__init__(f"no joint state received yet for joints {list(self.missing)}")


class StaleInputError(JointStateError):
    """An input is older than the allowed timeout.

    Used for joints here; the node may raise it for cameras too (``kind="camera"``).

    Attributes:
        kind: ``"joint"`` or ``"camera"``.
        name: The joint name or camera key.
        age_s: Age of its latest value in seconds.
        timeout_s: The allowed age in seconds (``sensor_timeout_s``).
    """

    def __init__(self, kind: str, name: str, age_s: float, timeout_s: float) -> None:
        self.kind = kind
        self.name = name
        self.age_s = age_s
        self.timeout_s = timeout_s
        super().__init__(
            f"{kind} {name!r} is stale: latest value is {age_s:.3f} s old, "
            f"older than sensor_timeout_s={timeout_s:g}"
        )


class NonFiniteStateError(JointStateError):
    """A joint's latest position is NaN or infinite.

    Attributes:
        joints: The offending joint names, in configured order.
    """

    def __init__(self, joints: Sequence[str], values: Sequence[float]) -> None:
        self.joints: tuple[str, ...] = tuple(joints)
        pairs = ", ".join(f"{name!r}: {value}" for name, value in zip(self.joints, values))
        super().__init__(f"joint positions are not finite: {{{pairs}}}")


class DuplicateJointError(JointStateError):
    """A ``JointState`` message names a joint more than once.

    Which of its positions is the joint's cannot be known, so the whole message is
    refused, and the repeated configured joints count as unknown until a message
    without repeats gives them again.

    Attributes:
        joints: The repeated names, in message order.
        positions: For each, the positions the message gave it.
    """

    def __init__(self, joints: Sequence[str], positions: Sequence[Sequence[float]]) -> None:
        self.joints: tuple[str, ...] = tuple(joints)
        self.positions: tuple[tuple[float, ...], ...] = tuple(tuple(p) for p in positions)
        listed = "; ".join(
            f"{name!r} {'twice' if len(values) == 2 else f'{len(values)} times'} "
            f"(at {', '.join(f'{v:g}' for v in values)})"
            for name, values in zip(self.joints, self.positions)
        )
        super().__init__(
            f"a JointState message names {listed}; refusing the message (each joint must "
            "appear once)"
        )


class ImplausibleJointError(JointStateError):
    """A judged joint's value is not trusted yet: fewer than :data:`TRUST_AFTER_SAMPLES`
    of its samples came in a row (since the first, a reset or a rejection), or one was
    rejected less than :data:`UNTRUSTED_FOR_S` seconds ago.

    Attributes:
        joint: The joint name.
        rejection: The sentence of its last rejected sample (None: none was; the joint
            has too few samples yet).
    """

    def __init__(self, joint: str, rejection: str | None, age_s: float, in_a_row: int) -> None:
        self.joint = joint
        self.rejection = rejection
        if rejection is None:
            text = (
                f"joint {joint!r} is not trusted yet: {in_a_row} of {TRUST_AFTER_SAMPLES} "
                "samples in a row so far (a lone sample cannot be told from a glitch)"
            )
        else:
            text = (
                f"joint {joint!r} is not trusted until {TRUST_AFTER_SAMPLES} samples in a row "
                f"and {UNTRUSTED_FOR_S:g} s pass without a rejected one (the last "
                f"{age_s:.3f} s ago: {rejection})"
            )
        super().__init__(text)


#: Longest a joint state's own header stamp may lie before its reception for the
#: stamp to count as when it was measured (a starved driver, DDS transport); an
#: older, a later or a zero stamp is another clock's, and the reception time counts.
MAX_TRANSPORT_S = 0.5


class JointStateCache:
    """Latest position and stamp per configured joint.

    Args:
        joint_names: The joints of the state vector, in the order the policy was
            trained on. Names must be unique and non-empty.

    Raises:
        JointStateError: Empty list, an empty name, or a duplicate name.
    """

    def __init__(self, joint_names: Sequence[str]) -> None:
        names = tuple(joint_names)
        if not names:
            raise JointStateError("joint_names is empty; expected at least one joint name")
        for name in names:
            if not isinstance(name, str) or not name:
                raise JointStateError(f"joint name {name!r} must be a non-empty string")
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise JointStateError(f"joint_names lists {duplicates} more than once")
        self._names = names
        self._index = {name: i for i, name in enumerate(names)}
        self._positions = np.zeros(len(names), dtype=np.float64)
        self._stamps = np.full(len(names), -math.inf, dtype=np.float64)
        self._measured = np.full(len(names), -math.inf, dtype=np.float64)
        # Whether _measured is the sample's own (plausible) header stamp.
        self._stamped = np.zeros(len(names), dtype=bool)
        # Velocity limits of the judged joints (inf: not judged), position-limited or not.
        self._max_velocity = np.full(len(names), math.inf, dtype=np.float64)
        self._wraps = np.zeros(len(names), dtype=bool)
        self._rejected_at = np.full(len(names), -math.inf, dtype=np.float64)
        self._accepted_since = np.zeros(len(names), dtype=np.int64)  # since the last rejection
        self._rejections: dict[int, str] = {}
        self.rejected_samples = 0
        self.last_rejection: str | None = None
        self._seen = np.zeros(len(names), dtype=bool)
        self._history: list[deque[tuple[float, float]]] = [
            deque(maxlen=HISTORY_LENGTH) for _ in names
        ]
        # Joints whose latest message was refused (named twice): unknown until a good one.
        self._refused: dict[int, DuplicateJointError] = {}
        self._lock = threading.Lock()

    @property
    def joint_names(self) -> tuple[str, ...]:
        """The configured joint order."""
        return self._names

    def set_velocity_limits(
        self, max_velocity: Mapping[str, float], continuous: Sequence[str] = ()
    ) -> None:
        """Judge samples of the joints in ``max_velocity`` against their limit (module
        docstring); ``continuous`` joints may also wrap by a full turn. Joints not in
        ``max_velocity`` are not judged."""
        limits = np.array([float(max_velocity.get(n, math.inf)) for n in self._names])
        wraps = np.array([n in continuous for n in self._names], dtype=bool)
        with self._lock:
            self._max_velocity = limits
            self._wraps = wraps

    def update(
        self,
        names: Sequence[str],
        positions: Sequence[float],
        stamp: float,
        *,
        measured_at: float | None = None,
    ) -> int:
        """Record positions from one ``JointState`` message.

        Joints that are not configured are ignored; a message may carry any subset in
        any order. An older message never overwrites a newer value of a joint. A
        message that names a joint twice is refused whole, and the repeated joints
        then count as unknown (:meth:`vector` raises) until a message gives them once.

        Args:
            names: ``JointState.name``.
            positions: ``JointState.position`` in radians or metres, same length.
            stamp: Time the positions were valid, in seconds (the header stamp, or
                the arrival time when the driver leaves it zero).
            measured_at: The message's own header stamp on the same clock, if it
                has one: used by :meth:`measured_at` when it is plausible (at most
                :data:`MAX_TRANSPORT_S` before ``stamp``, not after it), else ``stamp``.

        Returns:
            How many configured joints were updated.

        Raises:
            JointStateError: ``names`` and ``positions`` differ in length.
            DuplicateJointError: A name appears more than once (names it and its
                positions).
        """
        if len(names) != len(positions):
            raise JointStateError(
                f"JointState has {len(names)} names but {len(positions)} positions; "
                "expected one position per name"
            )
        if len(set(names)) != len(names):
            self._refuse_duplicates(names, positions)
        updated = 0
        when = float(stamp)
        stamped = measured_at is not None and stamp - MAX_TRANSPORT_S <= measured_at <= stamp
        if stamped and measured_at is not None:
            when = float(measured_at)  # the driver's stamp, on this clock and plausible
        with self._lock:
            for name, position in zip(names, positions):
                i = self._index.get(name)
                if i is None or stamp < self._stamps[i]:
                    continue
                value = float(position)
                rejection = self._implausible(i, value, float(stamp), when, stamped)
                if rejection is not None:
                    self._rejected_at[i] = float(stamp)
                    self._accepted_since[i] = 0
                    self._rejections[i] = rejection
                    self.rejected_samples += 1
                    self.last_rejection = rejection
                    continue
                self._positions[i] = value
                self._stamps[i] = float(stamp)
                self._measured[i] = when
                self._stamped[i] = stamped
                self._accepted_since[i] += 1
                self._seen[i] = True
                self._history[i].append((float(stamp), float(position)))
                self._refused.pop(i, None)
                updated += 1
        return updated

    def _implausible(
        self, i: int, value: float, stamp: float, when: float, stamped: bool
    ) -> str | None:
        """Why ``value`` (joint ``i``, received at ``stamp``, measured at ``when``) is
        rejected, or None (module docstring). Called under the lock."""
        vmax = float(self._max_velocity[i])
        last = float(self._positions[i])
        if not (self._seen[i] and math.isfinite(vmax) and math.isfinite(value)):
            return None
        if not math.isfinite(last):
            return None
        if stamped and self._stamped[i]:
            dt = when - float(self._measured[i])
        else:
            dt = stamp - float(self._stamps[i])
        dt = max(dt, 0.0)
        step = abs(value - last)
        if self._wraps[i]:
            step = min(step, abs(math.remainder(value - last, math.tau)))
        allowed = vmax * (IMPLAUSIBLE_SPEED_FACTOR * dt + TIMING_SLACK_S)
        if step <= allowed:
            return None
        speed = f"{step / dt:.1f}/s" if dt > 0 else "at once"
        return (
            f"joint {self._names[i]!r} sample {value:.4f} is {step:.4f} from its last "
            f"accepted {last:.4f}, {dt:.3f} s earlier ({speed}; more than "
            f"{IMPLAUSIBLE_SPEED_FACTOR:g} x its velocity limit {vmax:g}/s): rejected"
        )

    def _refuse_duplicates(self, names: Sequence[str], positions: Sequence[float]) -> None:
        values: dict[str, list[float]] = {}
        for name, position in zip(names, positions):
            values.setdefault(name, []).append(float(position))
        repeated = {name: v for name, v in values.items() if len(v) > 1}
        error = DuplicateJointError(list(repeated), list(repeated.values()))
        with self._lock:
            for name in repeated:
                i = self._index.get(name)
                if i is not None:
                    self._refused[i] = error
        raise error

    def reset(self) -> None:
        """Forget every joint (e.g. after the driver restarted)."""
        with self._lock:
            self._seen[:] = False
            self._stamps[:] = -math.inf
            for history in self._history:
                history.clear()
            self._refused.clear()
            self._rejected_at[:] = -math.inf
            self._accepted_since[:] = 0
            self._rejections.clear()

    def vector(self, now: float, timeout_s: float) -> np.ndarray:
        """Return the state vector in configured order.

        Args:
            now: Current time in seconds, on the clock of the stamps.
            timeout_s: Maximum age of every joint's latest value in seconds.

        Returns:
            A new float64 array of length ``len(joint_names)``.

        Raises:
            DuplicateJointError: The latest message for some joint named it twice
                and no message without repeats has come since.
            MissingJointsError: Joints never received (lists all of them).
            StaleInputError: The oldest joint older than ``timeout_s`` (names it and
                its age).
            NonFiniteStateError: NaN or infinite positions (lists them).
            ImplausibleJointError: A joint had a sample rejected and is not trusted
                again yet (module docstring).
        """
        with self._lock:
            seen = self._seen.copy()
            positions = self._positions.copy()
            stamps = self._stamps.copy()
            refused = next(iter(self._refused.values()), None)
            rejected_at = self._rejected_at.copy()
            accepted_since = self._accepted_since.copy()
            rejections = dict(self._rejections)
            judged = np.isfinite(self._max_velocity)
        if refused is not None:
            raise refused
        if not seen.all():
            raise MissingJointsError([n for n, ok in zip(self._names, seen) if not ok])
        finite = np.isfinite(positions)
        if not finite.all():
            bad = [i for i in range(len(self._names)) if not finite[i]]
            raise NonFiniteStateError(
                [self._names[i] for i in bad], [float(positions[i]) for i in bad]
            )
        untrusted = judged & (
            (now - rejected_at < UNTRUSTED_FOR_S) | (accepted_since < TRUST_AFTER_SAMPLES)
        )
        if untrusted.any():
            # The latest rejection, else the joint with the fewest samples.
            if np.isfinite(rejected_at[untrusted]).any():
                i = int(np.argmax(np.where(untrusted, rejected_at, -np.inf)))
            else:
                i = int(np.argmin(np.where(untrusted, accepted_since, np.iinfo(np.int64).max)))
            raise ImplausibleJointError(
                self._names[i], rejections.get(i), float(now - rejected_at[i]), accepted_since[i]
            )
        ages = now - stamps
        oldest = int(np.argmax(ages))
        if ages[oldest] > timeout_s:
            raise StaleInputError("joint", self._names[oldest], float(ages[oldest]), timeout_s)
        return positions

    def measured_at(self, names: Sequence[str]) -> float:
        """When the newest values of ``names`` were measured, the oldest of them: each
        joint's plausible header stamp (see :meth:`update`), else its stamp; ``-inf``
        while one was never seen."""
        with self._lock:
            return float(min(self._measured[self._index[name]] for name in names))

    def vector_at(self, t: float, now: float, timeout_s: float) -> np.ndarray:
        """The state vector at time ``t`` (<= ``now``), from each joint's history.

        Each joint's value is linearly interpolated between its two values around
        ``t``; after its newest value, the newest; before its oldest kept value, the
        oldest. The checks are those of :meth:`vector` at ``now`` (every joint known,
        its newest value fresh and finite), and the values used must be finite.

        Raises:
            MissingJointsError, StaleInputError, NonFiniteStateError: as :meth:`vector`.
        """
        self.vector(now, timeout_s)
        values = np.empty(len(self._names), dtype=np.float64)
        with self._lock:
            for i, history in enumerate(self._history):
                values[i] = _value_at(history, float(t))
        finite = np.isfinite(values)
        if not finite.all():
            bad = [i for i in range(len(self._names)) if not finite[i]]
            raise NonFiniteStateError(
                [self._names[i] for i in bad], [float(values[i]) for i in bad]
            )
        return values


def _value_at(history: deque[tuple[float, float]], t: float) -> float:
    """A joint's value at ``t`` from its ``(stamp, value)`` history (oldest first, not
    empty), scanning back from the newest: a frame is a few samples old."""
    newer: tuple[float, float] | None = None
    for stamp, value in reversed(history):
        if stamp <= t:
            if newer is None or newer[0] == stamp:
                return value
            a = (t - stamp) / (newer[0] - stamp)
            return value + a * (newer[1] - value)
        newer = (stamp, value)
    assert newer is not None
    return newer[1]  # older than everything kept: the oldest value
