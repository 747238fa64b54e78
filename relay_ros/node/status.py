"""``relay-ros status``: every policy_node on the ROS domain, from ``/diagnostics``.

Each policy_node publishes one ``DiagnosticStatus`` named ``<fully qualified node
name>: policy`` at 1 Hz and at once after every lifecycle transition, in every
lifecycle state
(:mod:`relay_ros.node.policy_node`). :class:`StatusMonitor` subscribes to
``/diagnostics``, keeps the newest status of each node and asks each node's
``~/get_state`` (lifecycle_msgs) for its lifecycle state as it is now; :func:`policy_status`
reads one into a :class:`PolicyStatus` (lifecycle state, level, server,
chunks, latency, observation age, why it holds); :func:`format_table` lays them
out for a terminal and :func:`as_json` for a script. A node whose last status is
older than :data:`STALE_AFTER_S` is shown as ``STALE`` (it stopped, or the network
between here and it did). Nothing here needs the ``ros2`` command line.
"""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from lifecycle_msgs.srv import GetState
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

__all__ = [
    "LEVELS",
    "STALE_AFTER_S",
    "PolicyStatus",
    "StatusMonitor",
    "as_json",
    "format_table",
    "policy_status",
    "run_status",
]

#: ``DiagnosticStatus`` levels by their byte value.
LEVELS = {0: "OK", 1: "WARN", 2: "ERROR", 3: "STALE"}
#: A node whose newest status is older than this (s) is shown STALE.
STALE_AFTER_S = 3.0
#: The suffix of policy_node's status name.
_SUFFIX = ": policy"

_QOS = QoSProfile(
    depth=100, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE
)


@dataclass(frozen=True)
class PolicyStatus:
    """One policy_node as its newest ``/diagnostics`` status shows it.

    Attributes:
        node: Its fully qualified name (``/robot1/policy_node``).
        state: Its lifecycle state (``active``, ``inactive``, ``unconfigured``, ...).
        level: ``OK``, ``WARN`` or ``ERROR`` (``STALE`` when it fell silent).
        message: The status sentence (why it is not OK).
        server: The policy server's URL (secrets hidden), "" before configure.
        connected: Whether the node is connected to it.
        chunks: Chunks published so far (None before configure).
        latency_ms: Observation -> reply latency p50 (None before the first reply).
        observation_age_s: Age of the last observation sent (None before the first).
        hold_reason: Why it holds position now ("" while it streams).
        received: When the status arrived (``time.monotonic()``).
    """

    node: str
    state: str
    level: str
    message: str
    server: str
    connected: bool
    chunks: int | None
    latency_ms: float | None
    observation_age_s: float | None
    hold_reason: str
    received: float

    def shown_level(self, now: float) -> str:
        """``level``, or ``STALE`` when the status is older than :data:`STALE_AFTER_S`."""
        return "STALE" if now - self.received > STALE_AFTER_S else self.level


def _number(text: str | None) -> float | None:
    try:
        return None if not text else float(text)
    except ValueError:
        return None


def policy_status(
    name: str, level: int, message: str, values: Mapping[str, str], received: float
) -> PolicyStatus | None:
    """The :class:`PolicyStatus` of one ``DiagnosticStatus`` (name, level, message,
    key/values) received at ``received``; None when it is not a policy_node's."""
    if not name.endswith(_SUFFIX):
        return None
    chunks = _number(values.get("chunks_published"))
    return PolicyStatus(
        node=values.get("node") or "/" + name[: -len(_SUFFIX)].lstrip("/"),
        state=values.get("lifecycle_state", "?"),
        level=LEVELS.get(level, str(level)),
        message=message,
        server=values.get("server", ""),
        connected=values.get("connected") == "True",
        chunks=None if chunks is None else int(chunks),
        latency_ms=_number(values.get("latency_p50_ms")),
        observation_age_s=_number(values.get("observation_age_s")),
        hold_reason=values.get("hold_reason", ""),
        received=received,
    )


def _from_message(status: DiagnosticStatus, received: float) -> PolicyStatus | None:
    level = status.level
    level = level[0] if isinstance(level, (bytes, bytearray)) else int(level)
    values = {kv.key: kv.value for kv in status.values}
    return policy_status(status.name, level, status.message, values, received)


_COLUMNS = ("NODE", "STATE", "LEVEL", "SERVER", "CHUNKS", "LATENCY", "OBS AGE", "WHY")


def _row(status: PolicyStatus, now: float) -> tuple[str, ...]:
    level = status.shown_level(now)
    if not status.server:
        server = "-"
    else:
        server = f"{status.server} ({'up' if status.connected else 'down'})"
    why = status.hold_reason or ("" if status.level == "OK" else status.message)
    if level == "STALE":
        why = f"no /diagnostics for {now - status.received:.0f} s; last: {why or status.message}"
    return (
        status.node,
        status.state,
        level,
        server,
        "-" if status.chunks is None else str(status.chunks),
        "-" if status.latency_ms is None else f"{status.latency_ms:.1f} ms",
        "-" if status.observation_age_s is None else f"{status.observation_age_s:.2f} s",
        why,
    )


def format_table(statuses: Iterable[PolicyStatus], now: float, width: int = 120) -> str:
    """The statuses as a table (one row per node, sorted by name) at most ``width``
    characters wide; the last column (why it is not OK) wraps under its row."""
    rows = [_row(s, now) for s in sorted(statuses, key=lambda s: s.node)]
    if not rows:
        return "no policy_node on this ROS domain (no '<node>: policy' status on /diagnostics)"
    fixed = [max(len(_COLUMNS[i]), *(len(r[i]) for r in rows)) for i in range(len(_COLUMNS) - 1)]
    lead = sum(fixed) + 2 * len(fixed)

    def line(cells: Sequence[str]) -> list[str]:
        head = "  ".join(c.ljust(w) for c, w in zip(cells, fixed))
        room = max(20, width - lead)
        why = textwrap.wrap(cells[-1], room) or [""]
        return [f"{head}  {why[0]}".rstrip()] + [" " * lead + rest for rest in why[1:]]

    out = line(_COLUMNS)
    for row in rows:
        out += line(row)
    return "\n".join(out)


def as_json(statuses: Iterable[PolicyStatus], now: float) -> list[dict[str, Any]]:
    """The statuses as JSON-ready dicts (sorted by node), each with its ``level`` as
    shown now (``STALE`` included) and ``age_s`` instead of ``received``."""
    out = []
    for status in sorted(statuses, key=lambda s: s.node):
        item = asdict(status)
        item["level"] = status.shown_level(now)
        item["age_s"] = round(now - item.pop("received"), 3)
        out.append(item)
    return out


class StatusMonitor:
    """A node that keeps the newest ``/diagnostics`` status of every policy_node, with
    the lifecycle state its ``~/get_state`` service gives (asked once a second).

    Args:
        context: An initialised rclpy context (the caller shuts it down).
    """

    def __init__(self, context: Context) -> None:
        self.node = rclpy.create_node(
            f"relay_ros_status_{os.getpid()}",
            context=context,
            start_parameter_services=False,
        )
        self._latest: dict[str, PolicyStatus] = {}
        # Per node: its get_state client, the call in flight, the last answer and when.
        self._clients: dict[str, Any] = {}
        self._pending: dict[str, Any] = {}
        self._states: dict[str, tuple[str, float]] = {}
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_array, _QOS)
        self._executor = SingleThreadedExecutor(context=context)
        self._executor.add_node(self.node)

    def _on_array(self, msg: DiagnosticArray) -> None:
        received = time.monotonic()
        for status in msg.status:
            row = _from_message(status, received)
            if row is not None:
                self._latest[row.node] = row

    def _ask_states(self) -> None:
        """Ask every node heard of for its lifecycle state (one call in flight each)."""
        for node in self._latest:
            future = self._pending.get(node)
            if future is not None and not future.done():
                continue
            client = self._clients.get(node)
            if client is None:
                client = self.node.create_client(GetState, f"{node}/get_state")
                self._clients[node] = client
            if client.service_is_ready():
                self._pending[node] = client.call_async(GetState.Request())

    def _take_states(self) -> None:
        for node, future in list(self._pending.items()):
            if future.done():
                del self._pending[node]
                result = future.result()
                if result is not None:
                    self._states[node] = (str(result.current_state.label), time.monotonic())

    def spin_for(self, seconds: float) -> None:
        """Take the statuses (and lifecycle states) that arrive during ``seconds``."""
        self._ask_states()
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._executor.spin_once(timeout_sec=min(left, 0.1))
            self._take_states()

    def statuses(self) -> list[PolicyStatus]:
        """The newest status of every policy_node heard so far; its state is the
        ``~/get_state`` answer when that is newer than the status."""
        out = []
        for node, status in self._latest.items():
            state = self._states.get(node)
            if state is not None and state[1] > status.received:
                status = replace(status, state=state[0])
            out.append(status)
        return out

    def close(self) -> None:
        """Stop listening (the executor and the node)."""
        self._executor.shutdown()
        self.node.destroy_node()


def _verdict(statuses: Sequence[PolicyStatus], now: float) -> int:
    """0 when some policy_node answered and none is at ERROR or STALE, else 1."""
    levels = {s.shown_level(now) for s in statuses}
    return 0 if statuses and not levels & {"ERROR", "STALE"} else 1


def run_status(*, once: bool, json_output: bool, wait_s: float, out: Any) -> int:
    """``relay-ros status``: listen to ``/diagnostics`` on this ROS domain
    (``ROS_DOMAIN_ID``) and write the table to ``out``.

    ``once``: listen ``wait_s`` seconds, write the table (or JSON) once and return
    the verdict (0: nodes answered, none at ERROR or STALE; 1: else). Otherwise
    redraw every second until interrupted (a terminal is cleared first), then
    return 0; a ``KeyboardInterrupt`` propagates to the caller after cleanup.
    """
    import json

    context = Context()
    rclpy.init(context=context, signal_handler_options=rclpy.signals.SignalHandlerOptions.NO)
    monitor = None
    try:
        monitor = StatusMonitor(context)
        if once:
            monitor.spin_for(wait_s)
            now = time.monotonic()
            statuses = monitor.statuses()
            if json_output:
                out.write(json.dumps(as_json(statuses, now), indent=2) + "\n")
            else:
                out.write(format_table(statuses, now, _width(out)) + "\n")
            out.flush()
            return _verdict(statuses, now)
        tty = out.isatty()
        domain = os.environ.get("ROS_DOMAIN_ID", "0")
        while True:
            monitor.spin_for(1.0)
            now = time.monotonic()
            header = (
                f"relay-ros status: ROS_DOMAIN_ID={domain}, {time.strftime('%H:%M:%S')}, "
                "Ctrl-C to quit"
            )
            table = format_table(monitor.statuses(), now, _width(out))
            out.write(("\x1b[H\x1b[2J" if tty else "\n") + f"{header}\n{table}\n")
            out.flush()
    finally:
        if monitor is not None:
            monitor.close()
        rclpy.shutdown(context=context, uninstall_handlers=False)


def _width(out: Any) -> int:
    """The terminal's width when ``out`` is one, else 200 (a log or a pipe)."""
    try:
        return os.get_terminal_size(out.fileno()).columns if out.isatty() else 200
    except (OSError, AttributeError, ValueError):
        return 200
