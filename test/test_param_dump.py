"""``ros2 param dump /policy_node`` and loading the dump back, with two real nodes.

ros2cli is not on PyPI, so this does what ``ros2 param dump`` does
(ros2param/verb/dump.py): list the node's parameters and get their values
through its real parameter services, sort the names, nest them at every ``.``
into one YAML mapping, ``yaml.dump`` it. The dump is then given as the only
params file to a new node of the same name, which must come up with the same
configuration and dump the same YAML. With a list parameter and a namespace of
one name (``outputs: [arm]`` next to ``outputs.arm.topic``, the names of earlier
releases) the nesting fails as ``ros2 param dump`` did.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import wait_until
from rcl_interfaces.msg import ParameterType
from rcl_interfaces.srv import GetParameters, ListParameters
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter

from relay_ros.node.policy_node import PolicyNode
from relay_ros.paths import config_dir
from relay_ros.server import ServerOptions, run_server_in_thread
from relay_ros.sim.arm_node import SimArmNode
from relay_ros.sim.cameras_node import SimCamerasNode

pytestmark = pytest.mark.ros

URDF = Path(__file__).parent / "urdf"


def insert_dict(dictionary: dict, key: str, value: Any) -> None:
    """ros2param's DumpVerb.insert_dict: nest ``key`` at its first '.'."""
    head, dot, rest = key.partition(".")
    if dot:
        if head not in dictionary:
            dictionary[head] = {}
        insert_dict(dictionary[head], rest, value)
    else:
        dictionary[key] = value


def get_value(value: Any) -> Any:
    """ros2param.api.get_value: a ParameterValue as plain Python (NOT_SET: None)."""
    field = {
        ParameterType.PARAMETER_BOOL: "bool_value",
        ParameterType.PARAMETER_INTEGER: "integer_value",
        ParameterType.PARAMETER_DOUBLE: "double_value",
        ParameterType.PARAMETER_STRING: "string_value",
        ParameterType.PARAMETER_BYTE_ARRAY: "byte_array_value",
        ParameterType.PARAMETER_BOOL_ARRAY: "bool_array_value",
        ParameterType.PARAMETER_INTEGER_ARRAY: "integer_array_value",
        ParameterType.PARAMETER_DOUBLE_ARRAY: "double_array_value",
        ParameterType.PARAMETER_STRING_ARRAY: "string_array_value",
    }.get(value.type)
    if field is None:
        return None
    result = getattr(value, field)
    return list(result) if field.endswith("array_value") else result


def dump_yaml(names_values: dict[str, Any], node_name: str) -> str:
    """What ``ros2 param dump`` prints for these parameters of ``/node_name``."""
    params: dict[str, Any] = {}
    for name in sorted(names_values):
        insert_dict(params, name, names_values[name])
    return yaml.dump({f"/{node_name}": {"ros__parameters": params}}, default_flow_style=False)


def _call(client_node: Node, service_type: Any, name: str, request: Any) -> Any:
    client = client_node.create_client(service_type, name)
    try:
        assert client.wait_for_service(timeout_sec=10.0), name
        future = client.call_async(request)
        wait_until(future.done, timeout=10.0)
        return future.result()
    finally:
        client_node.destroy_client(client)


def dump(client_node: Node, node_name: str) -> str:
    """``ros2 param dump /node_name`` through the node's parameter services."""
    listed = _call(
        client_node, ListParameters, f"/{node_name}/list_parameters", ListParameters.Request()
    )
    names = sorted(listed.result.names)
    got = _call(
        client_node,
        GetParameters,
        f"/{node_name}/get_parameters",
        GetParameters.Request(names=names),
    )
    return dump_yaml(dict(zip(names, (get_value(v) for v in got.values))), node_name)


class _Spinning:
    """A node (and the dump client) spun by a SingleThreadedExecutor on a thread."""

    def __init__(self, context: Any, node: Node) -> None:
        self.node = node
        self.client = Node(f"dump_client_{node.get_name()}", context=context)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(node)
        self.executor.add_node(self.client)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=5.0)
        self.thread.join(timeout=5.0)
        self.node.destroy_node()
        self.client.destroy_node()


def test_the_nesting_fails_on_a_list_next_to_its_namespace() -> None:
    """The instrument on the known answer: the names of earlier releases crash it,
    exactly as ``ros2 param dump`` crashed (TypeError: list indices must be integers)."""
    with pytest.raises(TypeError, match="list indices must be integers"):
        dump_yaml({"outputs": ["arm"], "outputs.arm.topic": "arm/joint_trajectory"}, "n")
    with pytest.raises(TypeError, match="list indices must be integers"):
        dump_yaml({"joint_limits.j1": [0.0, 1.0], "joint_limits.j1.max_velocity": 1.0}, "n")
    # The sim nodes' names of earlier releases.
    with pytest.raises(TypeError, match="list indices must be integers"):
        dump_yaml({"cameras": ["base"], "cameras.base.width": 64}, "n")


@pytest.mark.parametrize(
    "model, extra",
    [
        # The shipped config plus a URDF, a per-joint override and a live-looking value.
        (
            "pi05",
            {
                "seed": 3,
                "request_lead_s": 0.15,
                "joint_limits.joint1.has_acceleration_limits": True,
                "joint_limits.joint1.max_acceleration": 40.0,
            },
        ),
        # GR00T: outputs.<name>.dims unset (the whole action group).
        ("groot", {}),
    ],
)
def test_a_dump_loads_back_into_the_same_node(
    ros_context: Any, tmp_path: Path, model: str, extra: dict[str, Any]
) -> None:
    name = f"dump_{model}"
    with run_server_in_thread(ServerOptions(models=(model,))) as server:
        overrides = {"policy_url": server.url_template, **extra}
        text, config = _dump_of(
            ros_context,
            name,
            ["--ros-args", "--params-file", str(config_dir() / f"{model}.yaml")],
            overrides,
        )
        dumped = yaml.safe_load(text)[f"/{name}"]["ros__parameters"]
        assert dumped["output_names"] == ["arm", "gripper"]
        assert isinstance(dumped["outputs"]["arm"], dict)
        assert "dims" not in dumped["outputs"]["arm"] or model != "groot"
        assert None not in _leaves(dumped), "a declared parameter without a value"
        path = tmp_path / "dump.yaml"
        path.write_text(text)

        second = PolicyNode(
            name, context=ros_context, cli_args=["--ros-args", "--params-file", str(path)]
        )
        spinning = _Spinning(ros_context, second)
        try:
            assert second.config == config
            assert dump(spinning.client, name) == text
        finally:
            spinning.close()


def test_a_dump_with_a_robot_description_file_loads_back(ros_context: Any, tmp_path: Path) -> None:
    joints = ["fr3_joint1", "fr3_joint2", "fr3_joint3", "fr3_joint4", "fr3_joint5", "fr3_joint6"]
    params = {
        "model": "pi05",
        "policy_url": "ws://127.0.0.1:9/{model}",
        "state_joints": [*joints, "fr3_joint7", "fr3_finger_joint1"],
        "output_names": ["arm", "hand"],
        "outputs.arm.topic": "arm/joint_trajectory",
        "outputs.arm.joints": [*joints, "fr3_joint7"],
        "outputs.arm.dims": [0, 1, 2, 3, 4, 5, 6],
        "outputs.hand.topic": "hand/joint_trajectory",
        "outputs.hand.joints": ["fr3_finger_joint1"],
        "outputs.hand.dims": [7],
        "robot_description_file": str(URDF / "fr3.urdf"),
        "joint_limits.fr3_joint7.has_velocity_limits": True,
        "joint_limits.fr3_joint7.max_velocity": 1.0,
    }
    name = "dump_fr3"
    text, config = _dump_of(ros_context, name, None, params)
    assert config.joint_limits["fr3_joint4"].max_position == -0.1518  # from the URDF
    assert config.joint_limits["fr3_joint7"].max_velocity == 1.0  # the override
    path = tmp_path / "dump.yaml"
    path.write_text(text)
    second = PolicyNode(
        name, context=ros_context, cli_args=["--ros-args", "--params-file", str(path)]
    )
    try:
        assert second.config == config
    finally:
        second.destroy_node()


def _dump_of(
    context: Any, name: str, cli_args: list[str] | None, overrides: dict[str, Any]
) -> tuple[str, Any]:
    """Start a PolicyNode, dump its parameters, destroy it: (the YAML, its NodeConfig)."""
    node = PolicyNode(
        name,
        context=context,
        cli_args=cli_args,
        parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()],
    )
    spinning = _Spinning(context, node)
    try:
        return dump(spinning.client, name), node.config
    finally:
        spinning.close()


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, dict):
        return [leaf for value in tree.values() for leaf in _leaves(value)]
    return [tree]


def _sim_dump(context: Any, make: Any, name: str, params: dict[str, Any]) -> tuple[str, Any]:
    node = make(node_name=name, context=context, parameter_overrides=params)
    spinning = _Spinning(context, node)
    try:
        return dump(spinning.client, name), node
    finally:
        spinning.close()


@pytest.mark.parametrize(
    "make, params, settings",
    [
        (
            SimArmNode,
            {
                "controller_names": ["arm", "gripper"],
                "controllers.arm.joints": ["a1", "a2"],
                "controllers.arm.initial_positions": [0.0, 0.5],
                "controllers.gripper.joints": ["g"],
                "metrics_rate_hz": 0.0,
            },
            lambda node: (dict(node.topics), node.joint_names),
        ),
        (
            SimCamerasNode,
            {
                "camera_names": ["base", "wrist"],
                "cameras.base.width": 64,
                "cameras.base.height": 48,
                "cameras.wrist.format": "compressed",
                "cameras.wrist.rate_hz": 1.0,
                "seed": 4,
            },
            lambda node: dict(node.cameras),
        ),
    ],
    ids=["sim_arm", "sim_cameras"],
)
def test_a_sim_node_dump_loads_back(
    ros_context: Any, tmp_path: Path, make: Any, params: dict[str, Any], settings: Any
) -> None:
    """``ros2 param dump`` of sim_arm and sim_cameras nests (the lists are not named like
    the per-item namespaces) and a node started from the dump runs the same way."""
    name = f"dump_{make.__name__.lower()}"
    text, node = _sim_dump(ros_context, make, name, params)
    dumped = yaml.safe_load(text)[f"/{name}"]["ros__parameters"]
    names = "controller_names" if make is SimArmNode else "camera_names"
    assert names in dumped, text
    assert dumped[names] == params[names]
    assert None not in _leaves(dumped), "a declared parameter without a value"
    path = tmp_path / "dump.yaml"
    path.write_text(text)
    second = make(
        node_name=name, context=ros_context, cli_args=["--ros-args", "--params-file", str(path)]
    )
    spinning = _Spinning(ros_context, second)
    try:
        assert settings(second) == settings(node)
        assert dump(spinning.client, name) == text
    finally:
        spinning.close()
