"""The gate: every trajectory policy_node publishes, chunks and holds, passes here.

One place, modelled on the controller the user runs (docs/node.md, "Safety"):

- :mod:`~relay_ros.pipeline.gate.gate`: :class:`Gate`, the chunk check and the holds;
- :mod:`~relay_ros.pipeline.gate.decisions`: :class:`Publish`, :class:`Hold`,
  :class:`Refuse`, what the core's collaborators return;
- :mod:`~relay_ros.pipeline.gate.controller`: what the controllers follow
  (:class:`CommandedMotion`) and where a new trajectory starts (:class:`ControllerModel`);
- :mod:`~relay_ros.pipeline.gate.chunks`: the check of a chunk's publication;
- :mod:`~relay_ros.pipeline.gate.stops`: the stop a hold commands;
- :mod:`~relay_ros.pipeline.gate.motion`: the motion check both pass (position,
  velocity, acceleration on every segment the controller interpolates);
- :mod:`~relay_ros.pipeline.gate.messages`: the ``JointTrajectory`` contents.

Import from the modules: this file imports none of them, so the smoothing
strategies (below the scheduler) can use the motion check without loading the gate,
which builds on the scheduler.
"""
