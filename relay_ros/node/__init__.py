"""The ROS 2 side: ``policy_node`` (a thin adapter that wires topics, services,
parameters and timers to :mod:`relay_ros.pipeline`), the parameter table and its
rclpy declarations, topic-name rules, debug topics and the launch arguments."""
