"""Reference policy server for the relay wire protocol (``python -m relay_ros.server``).

Serves π0, π0.5 and GR00T with a synthetic policy (or any Python policy object) so
robot teams can dry-run their set-up; see docs/protocol.md for what it accepts.
"""

from __future__ import annotations

# relay_ros.wire checks the websockets version first: one clear line when it is too old.
from relay_ros import wire as _wire  # noqa: F401
from relay_ros.server.in_thread import ServerHandle, run_server_in_thread
from relay_ros.server.options import (
    DEFAULT_MAX_SESSIONS,
    ServerOptions,
    ServerStartError,
    hard_size_limit,
    load_policy_factory,
)
from relay_ros.server.policy_server import PolicyServer
from relay_ros.server.stats import ServerStats

__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "PolicyServer",
    "ServerHandle",
    "ServerOptions",
    "ServerStartError",
    "ServerStats",
    "hard_size_limit",
    "load_policy_factory",
    "run_server_in_thread",
]
