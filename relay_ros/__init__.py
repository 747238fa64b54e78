"""relay_ros: connect a ROS 2 robot to a remote VLA policy server.

The public entry point is :class:`PolicyClient`. It is imported lazily so that
``import relay_ros.sim`` or the launch helpers never pull in the network stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from relay_ros._version import __version__

__all__ = ["PolicyClient", "__version__"]

if TYPE_CHECKING:
    from relay_ros.wire.client import PolicyClient


def __getattr__(name: str) -> Any:
    if name == "PolicyClient":
        # Lazily: the network stack loads only for users of the client.
        from relay_ros.wire.client import PolicyClient

        return PolicyClient
    raise AttributeError(f"module 'relay_ros' has no attribute {name!r}")
