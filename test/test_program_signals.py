"""Every long-running relay_ros program stops cleanly on signals as a terminal and launch send them.

Ctrl-C in a terminal signals the whole foreground group; ``ros2 launch`` (not on a
tty) forwards SIGINT to each process too, and sends SIGTERM when it is slow. Each
program here runs as its console script does (``relay_ros.entry_points``), in its
own process group, with real rclpy and DDS, and must end with exit 0 and no
traceback, whenever the signals come: while it runs, while it shuts down, at a
random moment of its start-up. Several processes run side by side so that each
test takes seconds.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import scaled, wait_until

from relay_ros.paths import config_dir
from relay_ros.server import ServerOptions, run_server_in_thread

pytestmark = [pytest.mark.ros, pytest.mark.slow]

_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def server():
    with run_server_in_thread(ServerOptions(models=("pi05",))) as handle:
        yield handle


def entry_command(entry: str, *args: str) -> list[str]:
    """What the console script ``entry`` runs (pip's wrapper: import, then call)."""
    code = f"import sys; from relay_ros.entry_points import {entry}; sys.exit({entry}())"
    return [sys.executable, "-c", code, *args]


@dataclass(frozen=True)
class ProgramSpec:
    """A program, its arguments, and the log line that says it is running."""

    name: str
    command: Callable[[str], list[str]]  # namespace -> command line
    ready: str


def _specs(server_url: str) -> list[ProgramSpec]:
    def ros(ns: str, *params: str, params_file: Path | None = None) -> list[str]:
        args = ["--ros-args", "-r", f"__ns:=/{ns}"]
        if params_file is not None:  # before -p: a later value wins
            args += ["--params-file", str(params_file)]
        for param in params:
            args += ["-p", param]
        return args

    return [
        ProgramSpec(
            "policy_node",
            lambda ns: entry_command(
                "policy_node",
                *ros(ns, f"policy_url:={server_url}", params_file=config_dir() / "pi05.yaml"),
            ),
            "policy_node for pi05",
        ),
        ProgramSpec("sim_arm", lambda ns: entry_command("sim_arm", *ros(ns)), "simulating"),
        ProgramSpec(
            "sim_cameras",
            lambda ns: entry_command(
                "sim_cameras",
                *ros(ns, "camera_names:=[c]", "cameras.c.width:=64", "cameras.c.height:=48"),
            ),
            "camera c:",
        ),
        ProgramSpec(
            "relay-policy-server",
            lambda ns: entry_command("policy_server", "--port", "0", "--model", "pi05"),
            "listening on",
        ),
    ]


def _signals_taken(pid: int) -> bool:
    """True once the program's own code runs: it handles SIGTERM (Python alone does not)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except FileNotFoundError:
        return True  # already gone: its exit status tells the rest
    return False


class Running:
    """One program in its own process group, its output collected as it comes."""

    def __init__(self, spec: ProgramSpec) -> None:
        self.spec = spec
        self.process = subprocess.Popen(
            spec.command(f"signals_{uuid.uuid4().hex[:8]}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own group, as a terminal's foreground job
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self.is_ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if self.spec.ready in line:
                self.is_ready.set()
        self.is_ready.set()  # ended: nothing more to wait for

    def wait_until_its_code_runs(self) -> None:
        wait_until(
            lambda: _signals_taken(self.process.pid),
            _TIMEOUT_S,
            f"{self.spec.name} starting",
            period=0.002,
        )

    def terminal_ctrl_c(self) -> None:
        """SIGINT to the whole group, as the terminal sends it."""
        os.killpg(self.process.pid, signal.SIGINT)

    def signal(self, sig: signal.Signals) -> None:
        """A signal to the process alone, as launch sends it."""
        self.process.send_signal(sig)

    def finish(self) -> tuple[int, str]:
        try:
            code = self.process.wait(timeout=scaled(_TIMEOUT_S))
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(timeout=scaled(_TIMEOUT_S))
        return code, "".join(self.lines)


def _assert_clean(name: str, code: int, output: str, what: str) -> None:
    assert code == 0, f"{name} ({what}) exited {code}:\n{output}"
    for bad in ("Traceback", "KeyboardInterrupt", "RCLError", "Error"):
        assert bad not in output, f"{name} ({what}) printed {bad!r}:\n{output}"


@pytest.mark.parametrize(
    "how",
    ["ctrl-c under launch", "ctrl-c twice and sigterm", "sigterm twice"],
)
def test_a_running_program_stops_cleanly_on_repeated_signals(server, how) -> None:
    programs = [Running(spec) for spec in _specs(server.url_template)]
    for program in programs:
        assert program.is_ready.wait(scaled(_TIMEOUT_S))
    for program in programs:
        if how == "ctrl-c under launch":
            program.terminal_ctrl_c()
            program.signal(signal.SIGINT)  # launch forwards it
        elif how == "ctrl-c twice and sigterm":
            program.terminal_ctrl_c()
            program.terminal_ctrl_c()
            program.signal(signal.SIGTERM)
        else:
            program.signal(signal.SIGTERM)
            program.signal(signal.SIGTERM)
    for program in programs:
        code, output = program.finish()
        _assert_clean(program.spec.name, code, output, how)
        # Which of two signals sent together comes first is the kernel's choice (two
        # of the same kind may even merge into one).
        assert re.search(r": (SIGINT|SIGTERM)[^\n]*: (shutting down|stopped)", output), output


def test_signals_at_random_moments_of_start_up_end_cleanly(server) -> None:
    # Each program starts three times; once its own code runs (it handles SIGTERM),
    # the signals come after a random delay that spans its start-up (imports, rclpy,
    # the node, the first spin). Seeded, so that a failure can be replayed.
    rng = random.Random(21)
    plans = []
    for spec in _specs(server.url_template):
        for _ in range(3):
            delay = rng.uniform(0.0, 2.5)
            how = rng.choice(["ctrl-c under launch", "sigterm", "ctrl-c twice"])
            plans.append((spec, delay, how))
    started = [(Running(spec), delay, how) for spec, delay, how in plans]

    def signal_later(program: Running, delay: float, how: str) -> None:
        program.wait_until_its_code_runs()
        time.sleep(delay)  # the random moment itself, not a wait for something
        if how == "sigterm":
            program.signal(signal.SIGTERM)
        else:
            program.terminal_ctrl_c()
            if how == "ctrl-c twice":
                program.terminal_ctrl_c()
            else:
                program.signal(signal.SIGINT)

    senders = [threading.Thread(target=signal_later, args=entry, daemon=True) for entry in started]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(scaled(_TIMEOUT_S))
    for program, delay, how in started:
        code, output = program.finish()
        _assert_clean(program.spec.name, code, output, f"{how} {delay:.3f} s into start-up")


def test_the_node_entry_points_answer_help_without_starting_ros(tmp_path: Path) -> None:
    runs = {
        (entry, flag): subprocess.Popen(
            entry_command(entry, flag), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for entry in ("policy_node", "sim_arm", "sim_cameras")
        for flag in ("--help", "-h")
    }
    for (entry, flag), process in runs.items():
        out, err = process.communicate(timeout=scaled(_TIMEOUT_S))
        assert process.returncode == 0, err
        assert err == "", f"{entry} {flag} logged (ROS started?):\n{err}"
        program = {"policy_node": "policy_node"}.get(entry, entry)
        assert out.startswith(f"usage: {program} [-h] [--ros-args"), out
        assert "reference: docs/" in out
        expected = {
            "policy_node": ["state_joints (string[]; required)", "~/enable", "/diagnostics"],
            "sim_arm": ["controllers.<name>.joints (string[])", "joint_states_topic", "~/metrics"],
            "sim_cameras": ["cameras.<name>.rate_hz (double)", "jpeg_quality (int; default 90)"],
        }[entry]
        for text in expected:
            assert text in out, f"{entry} {flag}: {text!r} missing:\n{out}"
