"""The wire: msgpack codec, server address, the blocking ``PolicyClient`` and the
``PolicyConnection`` worker that keeps it off the ROS executor. No rclpy."""
