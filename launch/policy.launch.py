"""Start policy_node: ros2 launch relay_ros policy.launch.py model:=pi05 prompt:="..."

namespace:=robot1 moves the node and its relative topics under /robot1.

Thin on purpose: the arguments and how they become parameters live in
relay_ros.node.launch_args, which is tested without a ROS install.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from relay_ros.node.launch_args import (
    POLICY_LAUNCH_ARGUMENTS,
    policy_node_namespace,
    policy_node_parameters,
)


def _policy_node(context):
    values = {
        arg.name: LaunchConfiguration(arg.name).perform(context) for arg in POLICY_LAUNCH_ARGUMENTS
    }
    return [
        Node(
            package="relay_ros",
            executable="policy_node",
            name="policy_node",
            namespace=policy_node_namespace(values),
            output="screen",
            parameters=policy_node_parameters(values),
        )
    ]


def generate_launch_description():
    arguments = [
        DeclareLaunchArgument(arg.name, default_value=arg.default, description=arg.description)
        for arg in POLICY_LAUNCH_ARGUMENTS
    ]
    return LaunchDescription([*arguments, OpaqueFunction(function=_policy_node)])
