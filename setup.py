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
        # python3 $(ros2 pkg prefix relay_ros)/share/relay_ros/examples/demo.py pi05
        ("share/" + package_name + "/examples", glob("examples/*.py")),
        (
            "share/" + package_name + "/config",
            glob("config/*.yaml") + glob("config/*.xml") + glob("config/*.urdf"),
        ),
        ("share/" + package_name + "/config/layouts", glob("config/layouts/*.yaml")),
    ],
    python_requires=">=3.10",
    install_requires=[
        "setuptools",
        "websockets>=14",
        "msgpack>=1.0",
        "numpy>=1.22,<3",
        "pyyaml>=6",
        "python-dotenv>=1.0",
        "rosbags>=0.10",
        # Recording (relay_ros/recording): no rosdep key exists for PyAV or pyarrow, so
        # pip installs them from here (docs/ros_install.md).
        "pyarrow>=15",
        "av>=14",
        # OpenCV (cv2) and matplotlib are not listed: on a ROS install they come from
        # rosdep (python3-opencv, python3-matplotlib) and a pip copy of OpenCV would
        # shadow the one cv_bridge is built against; in .venv requirements/ installs them.
    ],
    zip_safe=True,
    maintainer="relay_ros maintainers",
    maintainer_email="relay-ros@example.com",
    description="ROS 2 bridge from cameras and joint states to a remote VLA policy server "
    "and back to ros2_control trajectory controllers.",
    license="Apache-2.0",
    # colcon test runs pytest only when "pytest" is a test dependency. setuptools >= 72
    # drops tests_require (colcon then falls back to unittest: "Ran 0 tests"), so the
    # test dependencies are the "test" extra, which colcon-core reads as well.
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.2",
            "hypothesis>=6.100",
            "rosbags-image>=0.10",
            "pillow",
        ],
    },
    entry_points={
        "console_scripts": [
            # relay_ros.entry_points takes SIGINT/SIGTERM before the heavy imports.
            "policy_node = relay_ros.entry_points:policy_node",
            "relay-policy-server = relay_ros.entry_points:policy_server",
            "relay-ros = relay_ros.cli:main",
            "sim_cameras = relay_ros.entry_points:sim_cameras",
            "sim_arm = relay_ros.entry_points:sim_arm",
        ],
    },
)
