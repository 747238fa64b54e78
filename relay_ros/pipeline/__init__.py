"""The node's core, plain Python without rclpy: camera map, image conversion, joint
state cache, observation assembly, safety checks, the chunk scheduler, trajectory
points and statistics. Time is always passed in, so all of it is tested alone."""
