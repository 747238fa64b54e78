"""How a new chunk joins the motion the controllers follow: one object per strategy.

Every switch from one chunk to the next goes through the strategy in force
(:class:`Smoothing`, :mod:`~relay_ros.pipeline.smoothing.switch`); the
:class:`~relay_ros.pipeline.scheduler.ChunkScheduler` calls it when it re-times a
chunk for publication. The strategies, by the ``smoothing`` parameter value:

- ``none`` (:class:`NoSmoothing`): the chunk as it is;
- ``splice`` (:class:`Splice`): from the commanded position and velocity into the new
  chunk, inside the limits by construction; needs nothing from the server;
- ``prefix`` (:class:`ServerPrefix`): the server continues the committed actions; only
  with a server that advertises ``action_prefix``;
- ``crossfade`` (:class:`CrossFade`, ``blend_steps`` points), ``lerobot_average``
  (:class:`WeightedAverage`) and ``act_ensemble`` (:class:`TemporalEnsemble`): client
  averages of the old and new chunks, the anchors the splice is measured against.

``auto`` (the default) runs what measured best on the server connected
(:func:`auto_smoothing_name`, ``bench/motion.py``: docs/streaming.md); any other value
is a user's choice, refused with the reason when the server cannot support it
(:func:`make_smoothing`).
"""

from __future__ import annotations

from relay_ros.pipeline.gate.motion import MotionLimits
from relay_ros.pipeline.smoothing.average import CrossFade, TemporalEnsemble, WeightedAverage
from relay_ros.pipeline.smoothing.prefix import ServerPrefix
from relay_ros.pipeline.smoothing.splice import Splice
from relay_ros.pipeline.smoothing.switch import (
    Motion,
    NoSmoothing,
    Smoothed,
    Smoothing,
    SmoothingError,
    Switch,
)

__all__ = [
    "SMOOTHING_CHOICES",
    "CrossFade",
    "Motion",
    "NoSmoothing",
    "ServerPrefix",
    "Smoothed",
    "Smoothing",
    "SmoothingError",
    "Splice",
    "Switch",
    "TemporalEnsemble",
    "WeightedAverage",
    "auto_smoothing_name",
    "make_smoothing",
]

_STRATEGIES: dict[str, type[Smoothing]] = {
    cls.name: cls
    for cls in (NoSmoothing, Splice, ServerPrefix, CrossFade, WeightedAverage, TemporalEnsemble)
}
#: The ``smoothing`` parameter's values.
SMOOTHING_CHOICES: tuple[str, ...] = ("auto", *_STRATEGIES)


def auto_smoothing_name(server_prefix: bool) -> str:
    """What ``auto`` runs on a server that does (``server_prefix``) or does not
    advertise ``action_prefix``: ``splice`` on both. On the prefix server of
    ``bench/motion.py`` the splice with the automatic execute horizon tracks better
    than the prefix (which keeps the robot on the committed plan) at 80 and 200 ms on
    10 seeds, and ties behind ``lte``; the prefix is smoother (docs/streaming.md)."""
    return Splice.name


def make_smoothing(
    name: str,
    *,
    server_prefix: bool,
    limits: MotionLimits | None,
    blend_steps: int,
    execute_horizon: int,
) -> Smoothing:
    """The strategy for the ``smoothing`` parameter ``name`` on a server that does
    (``server_prefix``) or does not advertise ``action_prefix``.

    Args:
        name: One of :data:`SMOOTHING_CHOICES`.
        server_prefix: The server takes the ``action_prefix`` keys.
        limits: The commanded joints' limits in chunk columns (the splice keeps to
            them); None when some joint has none (nothing is published then).
        blend_steps: ``crossfade``'s length; 0: half the execute horizon.
        execute_horizon: The execute horizon (the crossfade's default length).

    Raises:
        SmoothingError: an unknown name, ``prefix`` on a server without the
            extension, or ``blend_steps`` set for another strategy than ``crossfade``.
    """
    chosen = auto_smoothing_name(server_prefix) if name == "auto" else name
    if chosen not in _STRATEGIES:
        raise SmoothingError(f"smoothing {name!r} is not one of {list(SMOOTHING_CHOICES)}")
    if blend_steps and chosen != CrossFade.name:
        raise SmoothingError(
            f"blend_steps {blend_steps} is the length of smoothing 'crossfade', not of "
            f"{chosen!r}; set smoothing to 'crossfade' or blend_steps to 0"
        )
    if _STRATEGIES[chosen].needs_prefix and not server_prefix:
        raise SmoothingError(
            f"smoothing {name!r} needs a server that advertises the action_prefix extension "
            "(metadata \"action_prefix\": true); this server does not. Use 'auto' or 'splice'"
        )
    if chosen == Splice.name:
        return Splice(limits=limits)
    if chosen == CrossFade.name:
        return CrossFade(blend_steps or max(1, execute_horizon // 2))
    return _STRATEGIES[chosen]()
