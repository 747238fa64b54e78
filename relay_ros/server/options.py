"""What configures the reference policy server, checked when it is built.

:class:`ServerOptions` holds every setting (the ``relay-policy-server`` flags map
1:1 onto its fields) and refuses a bad one with a message naming it;
:func:`load_policy_factory` resolves ``--policy module:factory``;
:func:`hard_size_limit` is the frame size past which websockets closes the socket.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from relay_ros.formats import FormatError, format_for
from relay_ros.models import MODEL_IDS
from relay_ros.server.policy_robot import VISUAL_MAX_SPEED, PolicyRobot
from relay_ros.server.synthetic import POLICY_KINDS

__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "MIB",
    "ServerOptions",
    "ServerStartError",
    "hard_size_limit",
    "load_policy_factory",
]

MIB = 1024 * 1024
#: Sessions kept per connection by default (one robot uses one per episode, or one
#: per arm; a client multiplexing a fleet over one connection stays far below it).
DEFAULT_MAX_SESSIONS = 256


class ServerStartError(RuntimeError):
    """The server could not start (bad options, port in use, policy factory failed)."""


def hard_size_limit(max_message_bytes: int) -> int:
    """Largest frame websockets buffers (bytes): ``max(2 * limit, limit + 1 MiB)``.

    Frames between ``max_message_bytes`` and this cap are answered with
    ``Invalid request payload``; larger ones close the connection with 1009.
    """
    return max(2 * max_message_bytes, max_message_bytes + MIB)


@dataclass(frozen=True)
class ServerOptions:
    """Everything that configures a :class:`PolicyServer` (the CLI flags map 1:1).

    Attributes:
        host: interface to bind.
        port: TCP port; 0 picks a free one (see :attr:`ServerHandle.port`).
        models: model IDs served, each on ``/{model}`` (default: every registered one,
            :data:`~relay_ros.models.MODEL_IDS`, a live view).
        lora_adapters: adapter names accepted in ``sampling_params.lora``.
        latency_ms: simulated inference time added to every observation (ms).
        jitter_ms: uniform random extra in ``[-jitter_ms, +jitter_ms]`` (ms, total >= 0).
        load_delay_s: metadata is sent only this long after the server starts (s),
            simulating model loading; connections opened meanwhile wait.
        idle_timeout_s: close a connection after this long without a frame (s); 0 = never.
        max_message_mib: frames larger than this get ``Invalid request payload`` (MiB).
        direct_url: advertised as metadata ``direct_url`` when set.
        embodiment: GR00T embodiment: a name in ``config/groot_embodiments.yaml``, a
            YAML path, or ``path.yaml:name``; ``None`` uses the file's default.
        layout: serve an openpi environment's observation layout (a shipped name:
            ``droid``, ``aloha``, ``libero``, or a layout YAML path) on every model
            path instead of the model's own format; ``None``: the model's format.
        policy: ``"module:factory"`` or a zero-argument callable returning a policy object
            with ``infer(obs: dict) -> dict | np.ndarray`` (openpi's ``BasePolicy``);
            optional ``metadata`` (dict merged into the metadata) and ``reset()``.
            ``None`` serves the built-in synthetic policy.
        needs_session_id: advertise ``needs_session_id`` and refuse observations
            without ``session_id``.
        synthetic: the built-in policy's plan: ``"flow"`` (ignores the cameras) or
            ``"visual"`` (moves to the red target of the simulated world).
        chunk_noise: scale of the built-in policy's chunk-to-chunk variation (0 = off,
            1 = the realistic default of `ChunkNoise`).
        action_prefix: advertise and honour the ``action_prefix`` extension
            (built-in policy only).
        max_speed: the built-in policy's speed bound per action dimension (rad/s; a
            shorter list's last value holds for the rest): the robot's, as a policy
            trained on its demonstrations moves (`relay_ros.server.policy_robot`);
            empty: the visual plan's 1.6 rad/s, the flow's none.
        max_acceleration: the built-in policy's acceleration bound per action
            dimension (rad/s^2), the same way; empty: none.
        rest_pose: the robot's rest pose per action dimension, the same way: where
            the built-in plans keep what they do not move; empty: 0.
        seed: seeds the random streams of observations without ``seed`` (session k
            of the server gets ``[seed, k]``); None = fresh OS entropy.
        max_sessions: sessions kept per connection; a new ``session_id`` beyond it
            evicts the least recently used session of that connection (its random
            stream starts afresh if it comes back), so a client can never grow the
            server's memory without bound. The default session counts as one.
        observation_hook: called as ``hook(model, observation)`` with every
            observation that passed validation, before the policy runs, on the
            server's loop (so it must be quick); ``relay-ros replay
            --save-observations`` uses it.
    """

    host: str = "127.0.0.1"
    port: int = 0
    models: Sequence[str] = MODEL_IDS
    lora_adapters: tuple[str, ...] = ()
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    load_delay_s: float = 0.0
    idle_timeout_s: float = 30.0
    max_message_mib: float = 64.0
    direct_url: str | None = None
    embodiment: str | None = None
    layout: str | None = None
    policy: str | Callable[[], Any] | None = None
    needs_session_id: bool = False
    synthetic: str = "flow"
    chunk_noise: float = 0.0
    action_prefix: bool = False
    max_speed: tuple[float, ...] = ()
    max_acceleration: tuple[float, ...] = ()
    rest_pose: tuple[float, ...] = ()
    seed: int | None = None
    observation_hook: Callable[[str, dict[str, Any]], None] | None = None
    max_sessions: int = DEFAULT_MAX_SESSIONS

    def __post_init__(self) -> None:
        if self.synthetic not in POLICY_KINDS:
            raise ValueError(f"synthetic={self.synthetic!r}; expected one of {list(POLICY_KINDS)}")
        if not math.isfinite(self.chunk_noise) or self.chunk_noise < 0:
            raise ValueError(f"chunk_noise={self.chunk_noise!r}; expected a finite number >= 0")
        if not self.models:
            raise ValueError(f"models is empty; expected some of {list(MODEL_IDS)!r}")
        PolicyRobot(self.max_speed, self.max_acceleration, self.rest_pose)  # refuses a bad one
        for model in self.models:
            if model not in MODEL_IDS:
                raise ValueError(f"model {model!r} is not one of {list(MODEL_IDS)!r}")
        if self.layout:
            try:
                format_for(self.models[0], self.layout)
            except FormatError as exc:
                raise ValueError(f"layout: {exc}") from None
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"models {list(self.models)!r} lists a model twice")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is not in 0..65535")
        for name in ("latency_ms", "jitter_ms", "load_delay_s", "idle_timeout_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}={value!r}; expected a finite number >= 0")
        if not math.isfinite(self.max_message_mib) or self.max_message_mib <= 0:
            raise ValueError(f"max_message_mib={self.max_message_mib!r}; expected a number > 0")
        if (
            isinstance(self.max_sessions, bool)
            or not isinstance(self.max_sessions, int)
            or self.max_sessions < 1
        ):
            raise ValueError(f"max_sessions={self.max_sessions!r}; expected an integer >= 1")

    @property
    def policy_robot(self) -> PolicyRobot | None:
        """The robot the built-in policy stands in for, None for its own defaults."""
        if not (self.max_speed or self.max_acceleration or self.rest_pose):
            return None
        speed = self.max_speed
        if not speed and self.synthetic == "visual":
            speed = (VISUAL_MAX_SPEED,)  # the visual plan keeps its speed bound
        return PolicyRobot(speed, self.max_acceleration, self.rest_pose)

    @property
    def max_message_bytes(self) -> int:
        """Largest accepted frame (bytes)."""
        return int(self.max_message_mib * MIB)


def load_policy_factory(spec: str) -> Callable[[], Any]:
    """Import ``"package.module:factory"`` and return the callable.

    Raises:
        ServerStartError: malformed spec, module not importable, or no such callable.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ServerStartError(f"policy {spec!r} is not 'module:factory'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ServerStartError(f"policy module {module_name!r} cannot be imported: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise ServerStartError(f"policy {spec!r}: {attr!r} is not a callable in {module_name!r}")
    return target
