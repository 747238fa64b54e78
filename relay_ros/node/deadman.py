"""The dead-man switch: commanding only while an operator holds a button.

With ``deadman_topic`` set, policy_node commands only while that topic brings a
``std_msgs/Bool`` ``true`` at least every ``deadman_timeout_s`` (a joystick button
republished at its rate, as teleop_twist_joy's enable button works). A ``false``,
silence longer than the timeout, or nothing at all since the node was configured
stops the robot: the streaming core holds with the reason
(:meth:`~relay_ros.pipeline.streaming.StreamingCore.set_switch`, switch
``deadman``) and commands again from the next fresh observation once ``true``
comes back.

:class:`DeadmanSwitch` only decides (plain Python, times on the node clock): the
node feeds it each message with its reception time, asks :meth:`~DeadmanSwitch.stop_reason`
on every tick, and wakes at :meth:`~DeadmanSwitch.expires_at`, so a released button
stops the robot within the timeout plus one tick.
"""

from __future__ import annotations

import math

__all__ = ["DeadmanSwitch"]


class DeadmanSwitch:
    """Whether the dead-man topic is pressed and fresh now (module docstring).

    Args:
        topic: The resolved topic name (named in every reason).
        timeout_s: How long one ``true`` counts (s); must be > 0.

    Raises:
        ValueError: a timeout that is not a positive finite number.
    """

    def __init__(self, topic: str, timeout_s: float) -> None:
        if not (math.isfinite(timeout_s) and timeout_s > 0.0):
            raise ValueError(f"deadman_timeout_s is {timeout_s!r}; expected seconds > 0")
        self.topic = topic
        self.timeout_s = float(timeout_s)
        self._pressed_at: float | None = None  # reception of the last true
        self._released = False  # the last message was false

    def received(self, pressed: bool, now: float) -> None:
        """One message on the topic, received at ``now`` (node clock)."""
        if pressed:
            self._pressed_at = now
            self._released = False
        else:
            self._pressed_at = None
            self._released = True

    def expires_at(self) -> float | None:
        """When the last ``true`` stops counting (node clock), None when not pressed."""
        return None if self._pressed_at is None else self._pressed_at + self.timeout_s

    def stop_reason(self, now: float) -> str | None:
        """Why the switch stops the robot at ``now``, or None while pressed and fresh.

        The reason's text does not change while the cause stays the same (no age in
        it), so a hold is said once.
        """
        if self._released:
            return f"dead-man switch released: false on {self.topic}"
        expires = self.expires_at()
        if expires is None:
            return f"dead-man switch: no true on {self.topic} yet (hold the button)"
        # A clock that went back (use_sim_time) makes the last true older than any
        # timeout: it does not count.
        if now > expires or now < expires - self.timeout_s:
            return (
                f"dead-man switch: no true on {self.topic} for {self.timeout_s:.2f} s "
                "(deadman_timeout_s)"
            )
        return None
