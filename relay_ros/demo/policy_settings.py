"""What the demo's policy does: the reference server's plan, its noise, the smoothing, faults.

`DemoPolicy` is passed to the server command (``--synthetic``, ``--chunk-noise``,
``--seed``, ``--action-prefix``) and to policy_node (``smoothing``); the same
``seed`` fixes the simulated world (the target's schedule). By default the server is
like the seeds' (its metadata has no ``action_prefix``: what a robot team has on
day one) and the node smooths as it would there (``auto``). `FAULTS` are the wiring
mistakes the demo can make on purpose, to show what they do to the task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from relay_ros.demo.errors import DemoArgumentError

__all__ = ["DEMO_LAYOUTS", "FAULTS", "POLICY_KINDS", "SMOOTHINGS", "DemoPolicy", "check_fault"]

#: Plans of the reference server: ``visual`` tracks the red target in the cameras,
#: ``flow`` is a smooth motion that ignores them.
POLICY_KINDS: tuple[str, ...] = ("visual", "flow")
#: policy_node's ``smoothing`` values (``relay_ros.pipeline.smoothing.SMOOTHING_CHOICES``,
#: not imported: importing the demo package must not load the pipeline; a test checks
#: that the two agree).
SMOOTHINGS: tuple[str, ...] = (
    "auto",
    "none",
    "splice",
    "prefix",
    "crossfade",
    "lerobot_average",
    "act_ensemble",
)
#: The openpi layouts the demo runs (the reference server serves them, and each ships
#: its ``config/<layout>.yaml`` pair; LIBERO's end-effector actions cannot run).
DEMO_LAYOUTS: tuple[str, ...] = ("droid", "aloha")
#: Wiring mistakes: the camera map's base and wrist topics exchanged, or a camera
#: driver that sends BGR pixels labelled rgb8.
FAULTS: tuple[str, ...] = ("swap-cameras", "swap-red-blue")


@dataclass(frozen=True)
class DemoPolicy:
    """The reference policy and chunk smoothing of a demo run.

    Attributes:
        kind: one of `POLICY_KINDS`.
        chunk_noise: scale of the server's chunk-to-chunk variation (0 = off, 1 = a
            sampled VLA's).
        smoothing: policy_node's ``smoothing``, one of `SMOOTHINGS`.
        server_prefix: the server advertises the ``action_prefix`` extension; None:
            only for smoothing ``prefix`` (which needs it).
        seed: seeds the server's noise and the world's target schedule.
        layout: an openpi layout (``droid``, ``aloha``) served by the reference server
            and spoken by the node, with ``config/<layout>.yaml`` and its camera map;
            None: the model's own format and ``config/<model>.yaml``.
        lora: a LoRA adapter the server serves and the node selects; None: the base
            model.

    Raises:
        DemoArgumentError: a value out of range (names it), or smoothing ``prefix``
            with ``server_prefix`` False.
    """

    kind: str = "visual"
    chunk_noise: float = 1.0
    smoothing: str = "auto"
    server_prefix: bool | None = None
    seed: int = 0
    layout: str | None = None
    lora: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in POLICY_KINDS:
            raise DemoArgumentError(f"policy {self.kind!r} is not one of {list(POLICY_KINDS)}")
        if self.smoothing not in SMOOTHINGS:
            raise DemoArgumentError(
                f"smoothing {self.smoothing!r} is not one of {list(SMOOTHINGS)}"
            )
        noise = self.chunk_noise
        if (
            isinstance(noise, bool)
            or not isinstance(noise, (int, float))
            or not (math.isfinite(noise) and noise >= 0)
        ):
            raise DemoArgumentError(f"chunk_noise {noise!r} is not a finite number >= 0")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise DemoArgumentError(f"seed {self.seed!r} is not an integer >= 0")
        if self.server_prefix is None:
            object.__setattr__(self, "server_prefix", self.smoothing == "prefix")
        if self.smoothing == "prefix" and not self.server_prefix:
            raise DemoArgumentError(
                "smoothing 'prefix' needs a server that advertises action_prefix; "
                "leave server_prefix unset or True"
            )
        if self.lora is not None and (not self.lora or self.lora != self.lora.strip()):
            raise DemoArgumentError(f"lora {self.lora!r} is not an adapter name")
        if self.layout is not None and self.layout not in DEMO_LAYOUTS:
            raise DemoArgumentError(
                f"layout {self.layout!r} is not one of the demo's layouts {list(DEMO_LAYOUTS)}"
            )

    @property
    def config_name(self) -> str | None:
        """The ``config/<name>.yaml`` pair the run uses instead of the model's, if any."""
        return self.layout

    @property
    def advertises_prefix(self) -> bool:
        """Whether the server advertises the ``action_prefix`` extension."""
        return bool(self.server_prefix)

    def label(self) -> str:
        """Short description for tables, e.g. ``visual policy, chunk noise 1, server
        without action_prefix (as the seeds'), smoothing auto, seed 0``."""
        server = (
            "server with action_prefix"
            if self.advertises_prefix
            else "server without action_prefix (as the seeds')"
        )
        return (
            f"{self.kind} policy, chunk noise {self.chunk_noise:g}, {server}, "
            f"smoothing {self.smoothing}, seed {self.seed}"
        )


def check_fault(fault: str | None) -> str | None:
    """Return ``fault`` if it is None or one of `FAULTS`.

    Raises:
        DemoArgumentError: it is not (names the value and the choices).
    """
    if fault is not None and fault not in FAULTS:
        raise DemoArgumentError(f"fault {fault!r} is not one of {list(FAULTS)}")
    return fault
