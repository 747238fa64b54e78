"""The wire: msgpack codec, server address, the blocking ``PolicyClient`` and the
``PolicyConnection`` worker that keeps it off the ROS executor. No rclpy.

Importing this package first checks that ``websockets`` is recent enough, so that a
ROS install that brought the distribution's old package (Ubuntu 22.04 and 24.04 ship
10.x) fails with one line saying what to install, instead of ``cannot import name
'ClientProtocol'`` from deep inside the client.
"""

from __future__ import annotations

import re

__all__ = ["MIN_WEBSOCKETS", "websockets_version_error"]

#: Oldest websockets the wire works with: the Sans-I/O ``websockets.client.ClientProtocol``
#: the client drives, and ``websockets.asyncio`` the reference server uses.
MIN_WEBSOCKETS: tuple[int, int] = (14, 0)

_PIP_COMMAND = 'python3 -m pip install "websockets>=14"'


def _release(version: str) -> tuple[int, ...]:
    """``"14.2"`` -> ``(14, 2)``; ``"16.0rc1"`` -> ``(16, 0)``; unparsable -> ``()``."""
    numbers = []
    for part in version.split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        numbers.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(numbers)


def websockets_version_error() -> str | None:
    """Why the installed ``websockets`` cannot be used, in one line, or None if it can.

    Imports ``websockets`` and reads its ``__version__`` (the module actually
    imported, not the metadata of some other copy on the path).
    """
    try:
        import websockets
    except ImportError as exc:
        return f"relay_ros needs the websockets package ({exc}); install it: {_PIP_COMMAND}"
    version = str(getattr(websockets, "__version__", "unknown"))
    release = _release(version)
    if not release or release < MIN_WEBSOCKETS:
        where = getattr(websockets, "__file__", None) or "an unknown location"
        return (
            f"relay_ros needs websockets >= {MIN_WEBSOCKETS[0]}.{MIN_WEBSOCKETS[1]} "
            f"but found {version} at {where}; install a newer one: {_PIP_COMMAND}"
        )
    return None


_error = websockets_version_error()
if _error is not None:
    raise ImportError(_error)
del _error
