"""What lets the streaming core command the robot: every switch that can stop it.

The core commands (requests chunks, publishes trajectories) only while no switch
stops it. Each switch belongs to one owner and says why it stops:

- ``lifecycle``: the node is not in the lifecycle state *active* (``deactivate``);
- ``enable``: an operator called ``~/enable`` with false;
- ``deadman``: the dead-man topic has no fresh ``true`` (``deadman_topic``).

When several stop at once, the reason shown is the first in :data:`SWITCHES` order:
the one the operator has to deal with first (activating the node before pressing
the dead-man button). Plain Python: the node decides when a switch changes, the
core (:meth:`relay_ros.pipeline.streaming.StreamingCore.set_switch`) holds when the
first one stops and resumes when the last one is released.
"""

from __future__ import annotations

__all__ = ["SWITCHES", "CommandSwitches"]

#: The switches, in the order their reasons are shown.
SWITCHES: tuple[str, ...] = ("lifecycle", "enable", "deadman")


class CommandSwitches:
    """Which switches stop the robot now, each with its reason (module docstring)."""

    def __init__(self) -> None:
        self._stops: dict[str, str] = {}

    def set(self, switch: str, stop: str | None) -> None:
        """Switch ``switch`` stops with reason ``stop``, or is released (None).

        Raises:
            ValueError: ``switch`` is not one of :data:`SWITCHES`, or a stop without
                a reason (an operator must always be told why).
        """
        if switch not in SWITCHES:
            raise ValueError(f"switch {switch!r} is not one of {list(SWITCHES)}")
        if stop is None:
            self._stops.pop(switch, None)
        elif not stop:
            raise ValueError(f"switch {switch!r} stops without a reason")
        else:
            self._stops[switch] = stop

    @property
    def on(self) -> bool:
        """Whether no switch stops the robot (the core may command)."""
        return not self._stops

    def stops(self, switch: str) -> bool:
        """Whether ``switch`` stops the robot now."""
        return switch in self._stops

    @property
    def reason(self) -> str | None:
        """Why the robot is stopped: the first stopping switch's reason, or None."""
        return next((self._stops[s] for s in SWITCHES if s in self._stops), None)
