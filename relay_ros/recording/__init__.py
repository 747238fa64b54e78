"""Recording what ran as LeRobot v3 datasets (plain Python: pyarrow and PyAV, no ROS).

- :mod:`.lerobot_format`: the dataset format as data (paths, features, info.json);
- :mod:`.stats`, :mod:`.video`: LeRobot's statistics and video encoding;
- :mod:`.episode`, :mod:`.dataset`: an episode's frames into its files, committed
  to a dataset directory one rename at a time, repaired when reopened;
- :mod:`.frames`: what a frame holds, taken causally from the inputs' history;
- :mod:`.plan`: the layout one node configuration records;
- :mod:`.recorder`: the worker thread behind a bounded queue.

policy_node records through :mod:`relay_ros.node.episode_recording`, ``relay-ros
export`` through :mod:`relay_ros.bag.export`; docs/recording.md.
"""
