"""The node's :class:`~relay_ros.pipeline.health.Health` as ``diagnostic_msgs`` messages.

:func:`~relay_ros.pipeline.health.assess` decides the level and the sentence without
ROS; this module only builds the ``DiagnosticStatus`` (and the ``DiagnosticArray``
policy_node publishes on ``/diagnostics`` at 1 Hz) from it.
"""

from __future__ import annotations

from collections.abc import Mapping

from builtin_interfaces.msg import Time as TimeMsg
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

from relay_ros.pipeline.health import Health

__all__ = ["diagnostic_array", "diagnostic_status"]


def diagnostic_status(
    health: Health, *, name: str, hardware_id: str, extra: Mapping[str, str]
) -> DiagnosticStatus:
    """``health`` as one status named ``name``; ``extra`` key/values (what only the
    node knows, e.g. its thread priority) follow the health's own values."""
    status = DiagnosticStatus()
    status.name = name
    status.hardware_id = hardware_id
    status.level = bytes([int(health.level)])
    status.message = health.message
    values = {**health.values, **extra}
    status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
    return status


def diagnostic_array(status: DiagnosticStatus, stamp: TimeMsg) -> DiagnosticArray:
    """The ``/diagnostics`` message carrying ``status``, stamped ``stamp``."""
    array = DiagnosticArray()
    array.header.stamp = stamp
    array.status = [status]
    return array
