"""The reference policy server as a subprocess of the demo, and its command line.

`server_command` is the command line (also what ``launch/demo.launch.py`` runs);
`ServerProcess` starts it on a free port, waits until it listens and always
terminates it, even when the demo itself is killed (Linux). A subprocess, so that
its simulated inference never holds the demo process's GIL.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from relay_ros.demo.errors import DemoArgumentError, DemoError
from relay_ros.demo.models import check_model, load_model_config
from relay_ros.demo.policy_settings import DemoPolicy
from relay_ros.sim.robot import policy_robot

__all__ = ["ServerProcess", "server_command"]

logger = logging.getLogger(__name__)

# Starts the server so that Linux terminates it when the demo dies without cleaning up
# (SIGKILL): PR_SET_PDEATHSIG survives exec. argv: parent pid, then the command.
_PDEATHSIG_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def server_command(
    model: str,
    *,
    port: int = 0,
    latency_ms: float = 80.0,
    jitter_ms: float = 20.0,
    port_file: Path | None = None,
    executable: Sequence[str] = ("relay-policy-server",),
    policy: DemoPolicy | None = None,
) -> list[str]:
    """The command line of the reference server for the demo.

    Args:
        model: A model ID of `relay_ros.models` (the only model served).
        port: TCP port, 0 = any free port (then pass ``port_file``).
        latency_ms: Simulated inference time per request in ms (>= 0).
        jitter_ms: Uniform random extra latency in [-J, +J] ms (>= 0).
        port_file: Where the server writes its bound port.
        executable: The server program, e.g. ``[sys.executable, "-m", "relay_ros.server"]``.
        policy: The built-in policy's plan, noise, seed and whether it advertises the
            ``action_prefix`` extension; None = `DemoPolicy` defaults (it does not, as
            the seeds' server). With a layout, the server's policy moves like that
            layout's robot (`relay_ros.sim.robot.policy_robot`).

    Raises:
        DemoArgumentError: unknown model, negative or non-finite latency or jitter,
            or a port outside 0..65535.
    """
    check_model(model)
    for name, value in (("latency_ms", latency_ms), ("jitter_ms", jitter_ms)):
        if not math.isfinite(value) or value < 0.0:
            raise DemoArgumentError(f"{name} {value!r} is not a finite number of ms >= 0")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise DemoArgumentError(f"port {port!r} is not an integer in [0, 65535]")
    command = [
        *executable,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        model,
        "--latency-ms",
        f"{latency_ms:g}",
        "--jitter-ms",
        f"{jitter_ms:g}",
        "--log-level",
        "WARNING",
    ]
    policy = policy or DemoPolicy()
    command += [
        "--synthetic",
        policy.kind,
        "--chunk-noise",
        f"{policy.chunk_noise:g}",
        "--seed",
        str(policy.seed),
    ]
    if policy.advertises_prefix:
        command.append("--action-prefix")
    if policy.layout:
        command += ["--layout", policy.layout]
        # The layout's robot (config/<layout>.yaml), not the simulated arm the
        # reference policy knows: its speed, acceleration and rest pose.
        robot = policy_robot(load_model_config(model, policy.layout))
        if robot is not None:
            for flag, values in (
                ("--max-speed", robot.max_speed),
                ("--max-acceleration", robot.max_acceleration),
                ("--rest-pose", robot.rest),
            ):
                if values:
                    command.append(f"{flag}={','.join(f'{v:g}' for v in values)}")
    if policy.lora:
        command += ["--lora", policy.lora]
    if port_file is not None:
        command += ["--port-file", str(port_file)]
    return command


class ServerProcess:
    """The reference server as a subprocess on a free port; a context manager.

    The server runs in its own session so that Ctrl-C reaches only the demo, which
    then stops the nodes first and the server last (no "disconnected" noise).
    `stop` terminates it (SIGTERM, then SIGKILL after ``stop_timeout_s``) and reaps it.
    On Linux the server also gets SIGTERM when the thread that started it dies, so
    even a SIGKILLed demo leaves no server behind.

    Args:
        model: Model to serve.
        latency_ms: Simulated inference time per request in ms.
        jitter_ms: Uniform random extra latency in [-J, +J] ms.
        startup_timeout_s: How long to wait for the port file in seconds.
        stop_timeout_s: How long to wait after SIGTERM before SIGKILL in seconds.
        policy: What the built-in policy runs (see `server_command`).
    """

    def __init__(
        self,
        model: str,
        *,
        latency_ms: float = 80.0,
        jitter_ms: float = 20.0,
        startup_timeout_s: float = 30.0,
        stop_timeout_s: float = 5.0,
        policy: DemoPolicy | None = None,
    ) -> None:
        self._model = model
        self._policy = policy
        self._latency_ms = latency_ms
        self._jitter_ms = jitter_ms
        self._startup_timeout_s = startup_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._log: IO[bytes] | None = None
        self.port: int | None = None

    @property
    def pid(self) -> int | None:
        """Process id of the server, or None before `start`."""
        return None if self._process is None else self._process.pid

    def running(self) -> bool:
        """True while the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def url(self) -> str:
        """``ws://127.0.0.1:PORT/<model>`` of the running server."""
        if self.port is None:
            raise DemoError("the policy server has not been started")
        return f"ws://127.0.0.1:{self.port}/{self._model}"

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines the server wrote to stdout/stderr."""
        if self._tmp is None:
            return ""
        path = Path(self._tmp.name) / "server.log"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def start(self) -> ServerProcess:
        """Start the server and wait until it listens.

        Raises:
            DemoError: the server exited or did not listen within ``startup_timeout_s``
                (the message includes the end of its log).
        """
        self._tmp = tempfile.TemporaryDirectory(prefix="relay_ros_demo_")
        tmp = Path(self._tmp.name)
        port_file = tmp / "port"
        command = server_command(
            self._model,
            port=0,
            latency_ms=self._latency_ms,
            jitter_ms=self._jitter_ms,
            port_file=port_file,
            executable=self._executable(),
            policy=self._policy,
        )
        self._log = open(tmp / "server.log", "wb")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self._startup_timeout_s
        while True:
            text = port_file.read_text().strip() if port_file.exists() else ""
            if text:
                self.port = int(text)
                logger.info("policy server pid %d on port %d", self._process.pid, self.port)
                return self
            if self._process.poll() is not None:
                code = self._process.returncode
                tail = self.log_tail()
                self.stop()
                raise DemoError(f"the policy server exited with status {code}: {tail}")
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise DemoError(
                    f"the policy server did not listen within {self._startup_timeout_s:g} s: "
                    f"{tail or 'no output'}"
                )
            time.sleep(0.05)

    @staticmethod
    def _executable() -> tuple[str, ...]:
        server = (sys.executable, "-m", "relay_ros.server")
        if sys.platform.startswith("linux"):
            return (sys.executable, "-c", _PDEATHSIG_LAUNCHER, str(os.getpid()), *server)
        return server

    def stop(self) -> None:
        """Terminate and reap the server; idempotent."""
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(self._stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
