"""The version of relay_ros, in the bottom layer so that any module can read it
(the wire's User-Agent) without importing the package root."""

__version__ = "0.1.0"
