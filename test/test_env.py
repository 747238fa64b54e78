"""WALLE_URL / WALLE_DIRECT lookup: environment first, else the nearest .env."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from relay_ros.models import MODEL_IDS, UnknownModelError
from relay_ros.wire.env import EnvSettingError, direct_enabled, find_env_file, resolve_url


def _write_env(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".env"
    path.write_text(text)
    return path


def test_environment_fills_model() -> None:
    env = {"WALLE_URL": "wss://acme--walle-{model}.modal.run"}
    assert resolve_url("pi05", environ=env) == "wss://acme--walle-pi05.modal.run"
    assert resolve_url("groot", environ=env) == "wss://acme--walle-groot.modal.run"


def test_every_model_id_is_accepted() -> None:
    env = {"WALLE_URL": "ws://127.0.0.1:8000/{model}"}
    assert [resolve_url(m, environ=env) for m in MODEL_IDS] == [
        "ws://127.0.0.1:8000/pi05",
        "ws://127.0.0.1:8000/pi0",
        "ws://127.0.0.1:8000/groot",
    ]


def test_unknown_model_names_the_allowed_ones() -> None:
    with pytest.raises(UnknownModelError) as info:
        resolve_url("pi5", environ={"WALLE_URL": "ws://h/{model}"})
    assert str(info.value) == "model 'pi5' is not one of ['pi05', 'pi0', 'groot']"
    assert isinstance(info.value, ValueError)


def test_unset_raises_keyerror(tmp_path: Path) -> None:
    with pytest.raises(KeyError) as info:
        resolve_url("pi05", environ={}, cwd=tmp_path)
    assert info.value.args == ("WALLE_URL",)


def test_env_file_in_working_directory(tmp_path: Path) -> None:
    _write_env(tmp_path, "WALLE_URL=ws://127.0.0.1:9/{model}\n")
    assert resolve_url("pi0", environ={}, cwd=tmp_path) == "ws://127.0.0.1:9/pi0"


def test_nearest_parent_env_file_wins_over_farther_one(tmp_path: Path) -> None:
    _write_env(tmp_path, "WALLE_URL=ws://far/{model}\n")
    _write_env(tmp_path / "a", "WALLE_URL=ws://near/{model}\n")
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    assert find_env_file(deep) == tmp_path / "a" / ".env"
    assert resolve_url("pi05", environ={}, cwd=deep) == "ws://near/pi05"


def test_environment_wins_over_env_file(tmp_path: Path) -> None:
    _write_env(tmp_path, "WALLE_URL=ws://file/{model}\n")
    env = {"WALLE_URL": "ws://environment/{model}"}
    assert resolve_url("pi05", environ=env, cwd=tmp_path) == "ws://environment/pi05"


def test_empty_environment_value_falls_back_to_file(tmp_path: Path) -> None:
    _write_env(tmp_path, "WALLE_URL=ws://file/{model}\n")
    assert resolve_url("pi05", environ={"WALLE_URL": ""}, cwd=tmp_path) == "ws://file/pi05"


def test_env_file_without_the_key_raises_keyerror(tmp_path: Path) -> None:
    _write_env(tmp_path, "OTHER=1\nWALLE_URL\n")
    with pytest.raises(KeyError):
        resolve_url("pi05", environ={}, cwd=tmp_path)


def test_reading_env_file_leaves_os_environ_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_env(tmp_path, "WALLE_URL=ws://file/{model}\nWALLE_DIRECT=0\n")
    monkeypatch.delenv("WALLE_URL", raising=False)
    monkeypatch.delenv("WALLE_DIRECT", raising=False)
    monkeypatch.chdir(tmp_path / "")
    # Defaults: os.environ and the working directory (python-dotenv's find_dotenv).
    assert resolve_url("groot") == "ws://file/groot"
    assert direct_enabled() is False
    assert "WALLE_URL" not in os.environ
    assert "WALLE_DIRECT" not in os.environ


def test_working_directory_search_reaches_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_env(tmp_path, "WALLE_URL=ws://parent/{model}\n")
    child = tmp_path / "run" / "here"
    child.mkdir(parents=True)
    monkeypatch.delenv("WALLE_URL", raising=False)
    monkeypatch.chdir(child)
    assert resolve_url("pi05") == "ws://parent/pi05"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [({}, True), ({"WALLE_DIRECT": "1"}, True), ({"WALLE_DIRECT": "0"}, False)],
)
def test_direct_enabled(tmp_path: Path, environ: dict[str, str], expected: bool) -> None:
    assert direct_enabled(environ, cwd=tmp_path) is expected


def test_direct_from_env_file_and_environment_wins(tmp_path: Path) -> None:
    _write_env(tmp_path, "WALLE_DIRECT=0\n")
    assert direct_enabled({}, cwd=tmp_path) is False
    assert direct_enabled({"WALLE_DIRECT": "1"}, cwd=tmp_path) is True


def test_direct_bad_value(tmp_path: Path) -> None:
    with pytest.raises(EnvSettingError) as info:
        direct_enabled({"WALLE_DIRECT": "yes"}, cwd=tmp_path)
    assert str(info.value) == "WALLE_DIRECT='yes' is not one of ['0', '1']"
