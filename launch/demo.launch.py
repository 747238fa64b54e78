"""The whole demo on a real ROS 2 install: ros2 launch relay_ros demo.launch.py model:=pi05

Starts the reference policy server, the simulated cameras and arm, and policy_node
(with config/<model>.yaml pointed at that server). Thin on purpose: which
programs run with which parameters comes from relay_ros.demo.demo_launch_plan,
the same code `python -m relay_ros.demo` uses, tested without a ROS install. The
server is started by its full path in the install's lib/relay_ros/ (found through
the ament index by installed_executable), since colcon does not put it on PATH.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from relay_ros.demo import DEMO_LAUNCH_ARGUMENTS, demo_launch_plan
from relay_ros.demo.launch_plan import installed_executable


def _demo(context):
    plan = demo_launch_plan(
        {arg.name: LaunchConfiguration(arg.name).perform(context) for arg in DEMO_LAUNCH_ARGUMENTS},
        server_executable=[installed_executable("relay-policy-server")],
    )
    nodes = [
        Node(
            package="relay_ros",
            executable=executable,
            name=executable,
            output="screen",
            parameters=parameters,
        )
        for executable, parameters in plan.node_parameters.items()
    ]
    return [ExecuteProcess(cmd=plan.server_cmd, output="screen"), *nodes]


def generate_launch_description():
    arguments = [
        DeclareLaunchArgument(arg.name, default_value=arg.default, description=arg.description)
        for arg in DEMO_LAUNCH_ARGUMENTS
    ]
    return LaunchDescription([*arguments, OpaqueFunction(function=_demo)])
