"""ROS topic name expansion without rclpy: where a relative or private name ends up.

policy_node's topic parameters and the shipped camera maps use relative names
(``joint_states``, ``arm_controller/joint_trajectory``), so a namespace pushed
onto the node moves them. Code that needs the absolute name without a node, such
as replay checking a bag's topics before anything starts, expands them here with
the rules of ``rcl_expand_topic_name``:

- ``/a/b`` is absolute and stays;
- ``~`` and ``~/x`` are private: ``<namespace>/<node>`` and ``<namespace>/<node>/x``;
- anything else is relative: ``<namespace>/<name>``;
- the substitutions ``{node}`` and ``{ns}`` / ``{namespace}`` are filled in.

Remapping rules (``-r from:=to``) are not applied: they exist only in a running node.
"""

from __future__ import annotations

__all__ = ["expand_topic_name"]


def expand_topic_name(name: str, node_name: str = "policy_node", namespace: str = "/") -> str:
    """The absolute topic name ``name`` has for node ``node_name`` in ``namespace``.

    Raises:
        ValueError: ``name`` is empty or ``namespace`` is not absolute.
    """
    if not name:
        raise ValueError("topic name is empty; expected e.g. 'joint_states' or '/joint_states'")
    if not namespace.startswith("/"):
        raise ValueError(f"namespace {namespace!r} must start with '/'")
    base = namespace.rstrip("/")
    name = name.replace("{node}", node_name).replace("{namespace}", base).replace("{ns}", base)
    if name.startswith("/"):
        return name
    if name == "~" or name.startswith("~/"):
        return f"{base}/{node_name}{name[1:]}"
    return f"{base}/{name}"
