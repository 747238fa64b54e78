"""Everything the streaming core builds from one connected server, built at once.

On every (re)connect the core turns the server's metadata and the node's settings
into a :class:`ServerSession`: the parsed server (:class:`ServerSpec`), the
:class:`ChunkScheduler` for its horizon and rate, the observation builder for its
wire format, the output controllers with their action dimensions, and the reply
reader. :meth:`ServerSession.open` either builds all of it or raises
:class:`SessionError` naming what does not fit, so the core never runs with half of
a configuration. A reply or a timer event from an earlier session is recognised by
its ``generation``. :class:`SessionSlot` holds the current session and what
outlives one: the generation count, why the last server did not fit, and (in the
counters) the stall and late drops of the schedulers it dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from relay_ros.pipeline.adaptive_timing import AdaptiveTiming
from relay_ros.pipeline.observation import ObservationBuilder, ObservationError
from relay_ros.pipeline.outputs import OutputController, OutputsError, load_outputs
from relay_ros.pipeline.replies import ReplyReader
from relay_ros.pipeline.request_clock import RequestClock
from relay_ros.pipeline.scheduler import ChunkScheduler
from relay_ros.pipeline.server_spec import ServerSpec, ServerSpecError
from relay_ros.pipeline.settings import StreamingConfigError, StreamingSettings, scheduler_config
from relay_ros.pipeline.stats import LatencyStats
from relay_ros.pipeline.streaming_counts import StreamingCounts

__all__ = ["ServerSession", "SessionError", "SessionSlot", "check_lora", "lora_text"]


class SessionError(ValueError):
    """The node's configuration does not fit the connected server (the message says how)."""


def check_lora(lora: str, spec: ServerSpec) -> None:
    """Refuse a LoRA adapter the server does not serve, in the seed server's words.

    Raises:
        StreamingConfigError: ``lora`` is set and not in the server's ``lora_adapters``
            (or the server announces none: an openpi server takes no adapter).
    """
    if not lora:
        return
    if spec.lora_adapters is None:
        raise StreamingConfigError(
            f"LoRA adapter {lora!r} is set, but the server announces no lora_adapters "
            "(an openpi server runs its checkpoint only); set lora to '' for the base model"
        )
    if lora not in spec.lora_adapters:
        raise StreamingConfigError(
            f"Unknown LoRA adapter {lora!r}; this server serves {list(spec.lora_adapters)!r}"
        )


@dataclass
class ServerSession:
    """What depends on the connected server; rebuilt on every (re)connect.

    Attributes:
        spec: The server's metadata, parsed.
        scheduler: The chunk timeline for its horizon and rate.
        builder: Observations in its wire format.
        outputs: The output controllers and the action dimensions each drives.
        reader: Decodes and checks its replies.
        generation: Counts the sessions of one core (replies carry it).
        timeline: Counts the schedulers of this session: a jump of the node clock
            gives it a new one (replies carry it; one from an old timeline is dropped).
    """

    spec: ServerSpec
    scheduler: ChunkScheduler
    builder: ObservationBuilder
    outputs: list[OutputController]
    reader: ReplyReader
    generation: int
    timeline: int = 0

    @classmethod
    def open(
        cls,
        metadata: Mapping[str, Any],
        config: StreamingSettings,
        *,
        camera_keys: Sequence[str],
        latencies: LatencyStats,
        generation: int,
        timing: AdaptiveTiming | None = None,
    ) -> ServerSession:
        """Build the session for a server that announced ``metadata``; ``latencies``
        are the measurements the scheduler's automatic lead reads (kept across
        sessions), ``timing`` the rule it reads them with (None: the default).

        Raises:
            SessionError: malformed metadata, or settings the server cannot run
                with (the control rate, the execute horizon, the outputs' dimensions,
                the camera keys).
        """
        try:
            spec = ServerSpec.from_metadata(metadata, model=config.model, layout=config.layout)
            check_lora(config.lora, spec)
            sched_config = scheduler_config(config, spec, timing=timing)
            outputs = load_outputs({o.name: o.as_mapping() for o in config.outputs}, spec)
            builder = ObservationBuilder(
                spec, camera_keys=camera_keys, state_joints=config.state_joints
            )
        except (ServerSpecError, StreamingConfigError, OutputsError, ObservationError) as exc:
            raise SessionError(str(exc)) from None
        used_dims = np.array([d for o in outputs for d in o.dims], dtype=np.intp)
        dim_joints = {d: j for o in outputs for d, j in zip(o.dims, o.joints)}
        return cls(
            spec=spec,
            scheduler=ChunkScheduler(sched_config, latencies),
            builder=builder,
            outputs=outputs,
            reader=ReplyReader(spec, used_dims, dim_joints, dt=sched_config.dt),
            generation=generation,
        )

    def describe(self, config: StreamingSettings) -> str:
        """The log line for the connection: the timeline, and how chunks are joined
        (with whether the server advertises the action prefix)."""
        sched = self.scheduler.config
        layout = f" ({self.spec.format.name})" if config.layout else ""
        execute = (
            f"execute automatic (latency's, {sched.timing.min_execute_horizon} to "
            f"{sched.execute_horizon})"
            if sched.adaptive_execute_horizon
            else f"execute {sched.execute_horizon}"
        )
        lead = (
            "lead automatic (median latency)"
            if config.request_lead_s is None
            else f"lead {config.request_lead_s:g} s"
        )
        timing = f"{execute}, {lead}" if config.request_mode == "early" else execute
        prefix = "advertises" if self.spec.action_prefix else "does not advertise"
        ramp = f"ramp-in {sched.ramp_in_s:g} s" if sched.ramp_in_s else "no ramp-in"
        return (
            f"connected: {config.model}{layout}, {lora_text(config.lora, config.lora_scale)}, "
            f"horizon {self.spec.action_horizon}, dt {1000.0 * sched.dt:.1f} ms, {timing}, "
            f"{config.request_mode} requests, {ramp}; "
            f"smoothing {sched.smoothing.describe()} ({config.smoothing!r}; the server "
            f"{prefix} action_prefix)"
        )


def lora_text(lora: str, scale: float) -> str:
    """``"LoRA 'towels' x0.5"`` or ``"base model"``, for the log and /diagnostics."""
    if not lora:
        return "base model"
    return f"LoRA {lora!r}" + ("" if scale == 1.0 else f" x{scale:g}")


class SessionSlot:
    """The session with the server connected now (None between connections).

    Args:
        clock: The request clock, told when a session opens (its first reply may
            carry the server's warm-up) and when one is dropped (nothing in flight).
        counts: Keeps the stall time and late drops of each dropped scheduler.
        timing: The automatic lead and execute horizon's rule (None: the default).
    """

    def __init__(
        self, clock: RequestClock, counts: StreamingCounts, timing: AdaptiveTiming | None = None
    ) -> None:
        self._clock = clock
        self._counts = counts
        self.timing = timing
        self._generation = 0
        self.current: ServerSession | None = None
        #: Why the configuration does not fit the last server announced, or None.
        self.config_error: str | None = None

    def open(
        self,
        metadata: Mapping[str, Any],
        config: StreamingSettings,
        *,
        camera_keys: Sequence[str],
        now: float,
    ) -> ServerSession:
        r"""Make the session of the server that announced ``metadata`` current (the
        previous one dropped at ``now``).

        Raises:
            SessionError: the configuration does not fit that server; ``config_error``
                says how, and the previous session is still current (the caller holds
                on it, then :meth:`drop`\ s it).
        """
        try:
            session = ServerSession.open(
                metadata,
                config,
                camera_keys=camera_keys,
                latencies=self._clock.estimate,
                generation=self._generation + 1,
                timing=self.timing,
            )
        except SessionError as exc:
            self.config_error = f"configuration does not fit the server: {exc}"
            raise
        self.config_error = None
        self._generation = session.generation
        self.drop(now)
        self._clock.connected()
        self.current = session
        return session

    def drop(self, now: float) -> None:
        """Forget the server; keep the stall and drop totals of its scheduler."""
        self._clock.abandon()
        if self.current is not None:
            self._counts.retire(self.current.scheduler, now)
        self.current = None
