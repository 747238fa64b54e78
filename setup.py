"""ament_python build for relay_ros (colcon on a real ROS 2 install, pip in .venv)."""

from glob import glob

from setuptools import find_packages, setup

package_name = "relay_ros"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
        ("share/" + package_name + "/launch", glob("launch/*.launch.py")),
        ("share/" + package_name + "/config", glob("config/*.yaml") + glob("config/*.xml")),
    ],
    python_requires=">=3.10",
    install_requires=[
        "setuptools",
        "websockets>=14",
        "msgpack>=1.0",
        "numpy>=1.22,<3",
        "pyyaml>=6",
        "python-dotenv>=1.0",
    ],
    zip_safe=True,
    maintainer="relay_ros maintainers",
    maintainer_email="relay-ros@example.com",
    description="ROS 2 bridge from cameras and joint states to a remote VLA policy server "
    "and back to ros2_control trajectory controllers.",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [
            "policy_node = relay_ros.node.policy_node:main",
            "relay-policy-server = relay_ros.server.__main__:main",
            "relay-ros = relay_ros.cli:main",
            "sim_cameras = relay_ros.sim.cameras_node:main",
            "sim_arm = relay_ros.sim.arm_node:main",
        ],
    },
)
