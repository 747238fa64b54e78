"""A malformed server URL is one line naming it redacted, never a traceback showing secrets.

Every place a URL comes from is tried with the URLs users really paste: a browser's
``https://user:password@host/...?token=...``, a typo'd scheme (``htp://``), and
credentials with no host. The programs run as their console scripts run them
(subprocesses): ``policy_node`` with ``WALLE_URL`` from the environment, from a
``.env`` file and with the ``policy_url`` parameter; ``relay-ros replay --url`` (a
value, and alone: ``WALLE_URL``). Each must print one line and exit 2; the library
(``PolicyClient``, ``PolicyConnection``) raises websockets' ``InvalidURI``, as the
client's documentation says, with the URL redacted. The password and the token
appear nowhere in any output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from make_fixture_bags import make_bags
from websockets.exceptions import InvalidURI

from relay_ros.paths import config_dir
from relay_ros.wire.client import PolicyClient
from relay_ros.wire.connection import PolicyConnection
from relay_ros.wire.env import parse_server_url

SECRETS = ("s3cret", "abc123")

#: A browser copy of a deployed server's address.
BROWSER = "https://user:s3cret@acme--walle-pi05.modal.run/pi05?token=abc123"
BROWSER_SAYS = (
    "https://***@acme--walle-pi05.modal.run/pi05?token=*** isn't a valid URI: scheme isn't "
    "ws or wss; a policy server speaks WebSocket: write wss:// instead of https:// "
    "(e.g. wss://host/pi05)"
)
TYPO = "htp://user:s3cret@host.example:8000/pi05?token=abc123"
TYPO_SAYS = (
    "htp://***@host.example:8000/pi05?token=*** isn't a valid URI: scheme htp:// isn't ws "
    "or wss; expected ws://host:port/path or wss://host/path"
)
NO_HOST = "wss://user:s3cret@/pi05?token=abc123"
NO_HOST_SAYS = "wss://***@/pi05?token=*** isn't a valid URI: hostname isn't provided"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (BROWSER, BROWSER_SAYS),
        (TYPO, TYPO_SAYS),
        (NO_HOST, NO_HOST_SAYS),
        (
            "http://127.0.0.1:8000/pi05",
            "http://127.0.0.1:8000/pi05 isn't a valid URI: scheme isn't ws or wss; a policy "
            "server speaks WebSocket: write ws:// instead of http:// (e.g. ws://host/pi05)",
        ),
        (
            "ws://user:s3cret@host:s3cret/pi05",
            "ws://***/pi05 isn't a valid URI: the port is not a number from 0 to 65535",
        ),
        (
            "ws://s3cret@host/pi05",
            "ws://***@host/pi05 isn't a valid URI: username provided without password",
        ),
        (
            "acme--walle-pi05.modal.run",
            "acme--walle-pi05.modal.run isn't a valid URI: scheme (none) isn't ws or wss; "
            "expected ws://host:port/path or wss://host/path",
        ),
    ],
)
def test_each_malformed_url_is_named_redacted_with_what_to_write(url: str, says: str) -> None:
    with pytest.raises(InvalidURI) as info:
        parse_server_url(url)
    assert str(info.value) == says
    assert not any(secret in repr(info.value.args) for secret in SECRETS)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_good_url_parses() -> None:
    uri = parse_server_url("wss://user:s3cret@host.example/pi05?token=abc123")
    assert (uri.host, uri.port, uri.user_info) == ("host.example", 443, ("user", "s3cret"))


@pytest.mark.parametrize("url", [BROWSER, TYPO, NO_HOST])
def test_the_library_raises_invalid_uri_without_the_secrets(url: str) -> None:
    """The client's documented exception type, with a message that is safe to log."""
    for make in (
        lambda: PolicyClient("pi05", url=url, open_timeout=5),
        lambda: PolicyConnection("pi05", url=url, on_result=lambda outcome: None),
    ):
        with pytest.raises(InvalidURI) as info:
            make()
        assert not any(secret in str(info.value) for secret in SECRETS), info.value


def test_a_python_program_shows_the_url_redacted_in_its_traceback() -> None:
    """A user's script that lets the exception through: the traceback is safe to paste."""
    done = subprocess.run(
        [sys.executable, "-c", "from relay_ros import PolicyClient; PolicyClient('pi05')"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "WALLE_URL": BROWSER.replace("pi05", "{model}")},
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == f"websockets.exceptions.InvalidURI: {BROWSER_SAYS}"
    _assert_no_secret(done)


# ------------------------------------------------------------------ the programs


def _assert_no_secret(done: subprocess.CompletedProcess[str]) -> None:
    for secret in SECRETS:
        assert secret not in done.stdout + done.stderr, done.stdout + done.stderr


def _policy_node(
    tmp_path: Path, *ros_args: str, walle_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALLE_")}
    if walle_url is not None:
        env["WALLE_URL"] = walle_url
    code = "import sys; from relay_ros.entry_points import policy_node; sys.exit(policy_node())"
    params = ("--params-file", str(config_dir() / "pi05.yaml"))
    return subprocess.run(
        [sys.executable, "-c", code, "--ros-args", *params, *ros_args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,  # no .env above it (tmp_path), unless the test writes one
    )


def _fatal(done: subprocess.CompletedProcess[str]) -> str:
    """The one FATAL line's text after the logger name; exit 2, nothing else printed."""
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2, lines
    assert len(lines) == 1, lines
    match = re.fullmatch(r"\[FATAL\] \[[0-9.]+\] \[policy_node\]: (.*)", lines[0])
    assert match is not None, lines[0]
    return match.group(1)


@pytest.mark.ros
def test_policy_node_walle_url_from_the_environment(tmp_path: Path) -> None:
    done = _policy_node(tmp_path, walle_url=BROWSER.replace("pi05", "{model}"))
    assert _fatal(done) == f"ParameterError: WALLE_URL: {BROWSER_SAYS}"
    _assert_no_secret(done)


@pytest.mark.ros
def test_policy_node_walle_url_from_a_dotenv_file(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"WALLE_URL={TYPO.replace('pi05', '{model}')}\n")
    done = _policy_node(tmp_path)
    assert _fatal(done) == f"ParameterError: WALLE_URL: {TYPO_SAYS}"
    _assert_no_secret(done)


@pytest.mark.ros
def test_policy_node_policy_url_parameter(tmp_path: Path) -> None:
    done = _policy_node(tmp_path, "-p", f"policy_url:={NO_HOST}")
    params = config_dir() / "pi05.yaml"
    line = next(
        i for i, text in enumerate(params.read_text().splitlines(), 1) if "policy_url" in text
    )
    assert _fatal(done) == (
        f"ParameterError: parameter 'policy_url': {NO_HOST_SAYS} [set in {params}, line "
        f"{line}; -p policy_url:=wss://***@/pi05?token=***]"
    )
    _assert_no_secret(done)


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_bags(tmp_path_factory.mktemp("url_bags"), seconds=1.0, storages=("mcap",))["mcap"]


def _replay(
    bag: Path, tmp_path: Path, *url_args: str, walle_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALLE_")}
    if walle_url is not None:
        env["WALLE_URL"] = walle_url
    return subprocess.run(
        [sys.executable, "-m", "relay_ros.cli", "replay", str(bag), *url_args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )


@pytest.mark.ros
def test_replay_url_option(bag: Path, tmp_path: Path) -> None:
    done = _replay(bag, tmp_path, "--url", BROWSER)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"relay-ros replay: error: --url: {BROWSER_SAYS}\n"
    _assert_no_secret(done)


@pytest.mark.ros
def test_replay_url_alone_uses_walle_url(bag: Path, tmp_path: Path) -> None:
    done = _replay(bag, tmp_path, "--url", walle_url=NO_HOST.replace("pi05", "{model}"))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"relay-ros replay: error: WALLE_URL: {NO_HOST_SAYS}\n"
    _assert_no_secret(done)
