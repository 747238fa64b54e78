"""The ROS 2 side: ``policy_node`` (a thin adapter that wires topics, services,
parameters and timers to :mod:`relay_ros.pipeline`), its parameter declarations,
the controller outputs and the launch arguments."""
