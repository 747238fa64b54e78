"""relay_ros as a ROS 2 package: package.xml, setup.py, LICENSE and a real colcon build.

- package.xml parses with catkin_pkg (what rosdep, bloom and colcon-ros use) without
  a single warning, and declares exactly what the code imports: every third-party
  import of relay_ros/ and launch/ maps to one ``exec_depend``, every one of test/
  to a ``test_depend`` (or an ``exec_depend``), and nothing else is declared.
- setup.py, package.xml, LICENSE and the wire's websockets minimum agree.
- A copy of the package is built with ``colcon build`` in a temporary workspace:
  colcon must identify it as ``ros.ament_python``, and the install must hold what
  ``ros2 launch`` / ``ros2 run`` need. ``colcon test`` there must run real pytest
  tests (setuptools >= 72 ignores ``tests_require``; colcon then runs unittest and
  reports "Ran 0 tests" as a success).

catkin_pkg, colcon and ament_index_python are ROS tooling installed only in .venv
(requirements/test.txt, requirements/ros.txt), so these tests are marked ``ros``
and the ROS-free compatibility venvs (.ci/compat) leave them out.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from relay_ros.demo.errors import DemoError
from relay_ros.demo.launch_plan import demo_launch_plan, installed_executable
from relay_ros.wire import MIN_WEBSOCKETS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "relay_ros"

# Top-level import name -> the package.xml key (ROS package or rosdep key) providing it.
# A new third-party import fails test_every_import_is_declared until it is added here
# and to package.xml.
RUNTIME_KEYS = {
    "rclpy": "rclpy",
    "rcl_interfaces": "rcl_interfaces",
    "builtin_interfaces": "builtin_interfaces",
    "std_msgs": "std_msgs",
    "std_srvs": "std_srvs",
    "sensor_msgs": "sensor_msgs",
    "trajectory_msgs": "trajectory_msgs",
    "diagnostic_msgs": "diagnostic_msgs",
    "lifecycle_msgs": "lifecycle_msgs",
    "rosgraph_msgs": "rosgraph_msgs",
    "ament_index_python": "ament_index_python",
    "launch": "launch",
    "launch_ros": "launch_ros",
    "cv_bridge": "cv_bridge",
    "websockets": "python3-websockets",
    "msgpack": "python3-msgpack",
    "numpy": "python3-numpy",
    "cv2": "python3-opencv",
    "yaml": "python3-yaml",
    "dotenv": "python3-dotenv",
    "rosbags": "python3-rosbags-pip",
    "matplotlib": "python3-matplotlib",
}
#: Imports without a rosdep key (rosdistro's rosdep/*.yaml has none): setup.py's
#: install_requires and requirements/runtime.txt bring them (docs/ros_install.md).
PIP_ONLY = {"av": "av", "pyarrow": "pyarrow"}
TEST_KEYS = {
    "pytest": "python3-pytest",
    "hypothesis": "python3-hypothesis",
    "PIL": "python3-pil",
    "catkin_pkg": "python3-catkin-pkg",
}
# Test dependencies used without an import: the pytest plugin (timeout = ... in
# pyproject.toml) and the colcon command run by test_colcon_build_and_test.
TEST_TOOLS = {"python3-pytest-timeout", "python3-colcon-common-extensions"}


# --------------------------------------------------------------------------- helpers


def _third_party_imports(paths: list[Path], local: set[str]) -> dict[str, list[str]]:
    """Top-level names imported by ``paths`` that are neither stdlib, relay_ros nor local.

    Returns ``{name: [file, ...]}`` so that a failure names where the import is.
    """
    found: dict[str, list[str]] = {}
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                root = name.split(".")[0]
                if root in sys.stdlib_module_names or root == PACKAGE or root in local:
                    continue
                found.setdefault(root, []).append(str(path.relative_to(ROOT)))
    return found


def _code_files() -> list[Path]:
    return sorted((ROOT / PACKAGE).rglob("*.py")) + sorted((ROOT / "launch").glob("*.py"))


def _test_files() -> list[Path]:
    return sorted((ROOT / "test").glob("*.py"))


def _setup_keyword(name: str):
    """The literal value of keyword ``name`` of the setup() call in setup.py (None if absent)."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup":
            for keyword in node.keywords:
                if keyword.arg == name:
                    return ast.literal_eval(keyword.value)
            return None
    raise AssertionError("setup.py has no setup() call")


def _console_scripts() -> list[str]:
    entry_points = _setup_keyword("entry_points")
    return [line.split("=")[0].strip() for line in entry_points["console_scripts"]]


@pytest.fixture(scope="module")
def manifest():
    """package.xml parsed by catkin_pkg; any warning fails the test that uses it."""
    from catkin_pkg.package import parse_package

    warnings: list[str] = []
    package = parse_package(str(ROOT / "package.xml"), warnings=warnings)
    package.validate(warnings=warnings)
    assert warnings == [], f"catkin_pkg warnings for package.xml: {warnings}"
    return package


# --------------------------------------------------------------------------- package.xml


def test_package_xml_is_well_formed_xml():
    """The plain XML parse rosdep does first (``--`` inside a comment broke it once)."""
    root = ElementTree.parse(ROOT / "package.xml").getroot()
    assert root.tag == "package"
    assert root.get("format") == "3"


@pytest.mark.ros
def test_package_xml_parses_without_warnings(manifest):
    assert manifest.name == PACKAGE
    assert manifest.get_build_type() == "ament_python"
    assert [str(license) for license in manifest.licenses] == ["Apache-2.0"]
    assert manifest.version == _setup_keyword("version")


@pytest.mark.ros
def test_every_import_is_declared(manifest):
    """Each third-party import of relay_ros/ and launch/ has its exec_depend, and
    nothing is declared that the code does not import."""
    imports = _third_party_imports(_code_files(), local=set())
    unknown = {
        name: files
        for name, files in imports.items()
        if name not in RUNTIME_KEYS and name not in PIP_ONLY
    }
    assert unknown == {}, (
        f"imports without a package.xml key: {unknown}; add each to package.xml "
        "(exec_depend with its rosdep key) and to RUNTIME_KEYS"
    )
    declared = {dep.name for dep in manifest.exec_depends}
    needed = {RUNTIME_KEYS[name] for name in imports if name in RUNTIME_KEYS}
    assert declared - needed == set(), "declared but never imported"
    assert needed - declared == set(), "imported but not declared"
    # build_depend and depend would pull the packages in at build time: nothing is built.
    assert manifest.build_depends == [] and manifest.buildtool_depends == []


@pytest.mark.ros
def test_every_test_import_is_declared(manifest):
    local = {path.stem for path in _test_files()}
    # openpi's packages run only in .venv-openpi (they pin numpy<2): the stub policy is
    # a program of that venv (requirements/openpi.txt), not of the package's tests.
    files = [path for path in _test_files() if path.name != "openpi_stub_policy.py"]
    imports = _third_party_imports(files, local=local)
    unknown = {
        name: files
        for name, files in imports.items()
        if name not in RUNTIME_KEYS and name not in TEST_KEYS and name not in PIP_ONLY
    }
    assert unknown == {}, f"test imports without a package.xml key: {unknown}"
    declared = {dep.name for dep in manifest.test_depends}
    needed = {TEST_KEYS[name] for name in imports if name in TEST_KEYS} | TEST_TOOLS
    assert declared == needed
    # rosbags-image has no rosdep key: it reaches the tests through the "test" extra.
    assert "rosbags" in imports and "rosbags.image" in _imported_modules(_test_files())
    openpi = (ROOT / "requirements" / "openpi.txt").read_text(encoding="utf-8").splitlines()
    assert [line for line in openpi if line.startswith("openpi-")] == [
        "openpi-server==0.1.0",
        "openpi-client==0.1.2",
    ]


@pytest.mark.ros
def test_pip_only_imports_come_with_the_package(manifest):
    """PyAV and pyarrow have no rosdep key: setup.py and requirements/runtime.txt list
    them, package.xml names none of them."""
    imports = _third_party_imports(_code_files(), local=set())
    assert set(PIP_ONLY) <= set(imports)
    required = [d.split(">")[0].split("=")[0].strip() for d in _setup_keyword("install_requires")]
    runtime = (ROOT / "requirements" / "runtime.txt").read_text(encoding="utf-8")
    declared = {dep.name for dep in manifest.exec_depends}
    for name, dist in PIP_ONLY.items():
        assert dist in required, f"setup.py install_requires lacks {dist}"
        assert f"\n{dist}>=" in runtime, f"requirements/runtime.txt lacks {dist}"
        assert f"python3-{name}" not in declared, f"package.xml declares python3-{name}"


def _imported_modules(paths: list[Path]) -> set[str]:
    modules = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules.add(node.module)
    return modules


@pytest.mark.ros
def test_rosbags_image_is_only_a_test_dependency():
    code = _imported_modules(_code_files())
    assert not any(m == "rosbags.image" or m.startswith("rosbags.image.") for m in code)
    assert any(d.startswith("rosbags-image") for d in _setup_keyword("extras_require")["test"])
    runtime = (ROOT / "requirements" / "runtime.txt").read_text(encoding="utf-8")
    assert "rosbags-image" not in runtime
    assert "rosbags-image" in (ROOT / "requirements" / "test.txt").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- setup.py, LICENSE


def test_setup_declares_test_extra_for_colcon():
    """colcon runs pytest only when it sees pytest as a test dependency; setuptools >= 72
    drops ``tests_require``, so it must be the "test" extra."""
    assert _setup_keyword("tests_require") is None
    tests = _setup_keyword("extras_require")["test"]
    assert any(d.split(">")[0].split("=")[0].strip() == "pytest" for d in tests)


def test_websockets_minimum_agrees_everywhere():
    minimum = f"{MIN_WEBSOCKETS[0]}"
    assert f"websockets>={minimum}" in _setup_keyword("install_requires")
    root = ElementTree.parse(ROOT / "package.xml").getroot()
    (dep,) = [d for d in root.iter("exec_depend") if d.text == "python3-websockets"]
    assert dep.get("version_gte") == f"{MIN_WEBSOCKETS[0]}.{MIN_WEBSOCKETS[1]}"
    runtime = (ROOT / "requirements" / "runtime.txt").read_text(encoding="utf-8")
    assert f"websockets>={minimum}" in runtime


def test_license_file_matches_the_declared_license():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    root = ElementTree.parse(ROOT / "package.xml").getroot()
    assert root.findtext("license") == "Apache-2.0"
    assert _setup_keyword("license") == "Apache-2.0"
    # The full text, not a stub: the title, all 9 sections and the appendix.
    assert text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in text
    for section in range(1, 10):
        assert f"\n   {section}. " in text, f"section {section} missing"
    assert "END OF TERMS AND CONDITIONS" in text
    assert "APPENDIX: How to apply the Apache License to your work." in text
    assert len(text) > 11000


# --------------------------------------------------------------------------- installed_executable


def _fake_prefix(tmp_path: Path, *, script: str | None, executable: bool = True) -> Path:
    """An install prefix with relay_ros in its ament index, as colcon lays it out."""
    prefix = tmp_path / "prefix"
    marker = prefix / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE
    marker.parent.mkdir(parents=True)
    marker.write_text("")
    if script is not None:
        path = prefix / "lib" / PACKAGE / script
        path.parent.mkdir(parents=True)
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755 if executable else 0o644)
    return prefix


@pytest.mark.ros
def test_installed_executable_found_through_the_ament_index(tmp_path, monkeypatch):
    prefix = _fake_prefix(tmp_path, script="relay-policy-server")
    monkeypatch.setenv("AMENT_PREFIX_PATH", f"{tmp_path / 'elsewhere'}{os.pathsep}{prefix}")
    path = installed_executable()
    assert path == str(prefix / "lib" / PACKAGE / "relay-policy-server")
    # The demo launch plan then starts the server by that path, not by a bare name.
    plan = demo_launch_plan({"model": "pi05", "port": "8123"}, server_executable=[path])
    assert plan.server_cmd[0] == path
    assert plan.server_cmd[plan.server_cmd.index("--port") + 1] == "8123"


@pytest.mark.ros
def test_installed_executable_errors_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    with pytest.raises(DemoError) as info:
        installed_executable()
    message = str(info.value)
    assert message.startswith("cannot find 'relay-policy-server': package 'relay_ros' is not")
    assert "(AMENT_PREFIX_PATH is not set)" in message
    assert "source install/setup.bash" in message

    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(other))
    with pytest.raises(DemoError) as info:
        installed_executable()
    assert f"searched {other}" in str(info.value)

    prefix = _fake_prefix(tmp_path, script=None)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(prefix))
    with pytest.raises(DemoError) as info:
        installed_executable()
    script = prefix / "lib" / PACKAGE / "relay-policy-server"
    assert str(info.value) == (
        f"{script} does not exist; relay_ros in {prefix} is installed without its console "
        "scripts. Rebuild it: colcon build --packages-select relay_ros"
    )

    shutil.rmtree(prefix)
    prefix = _fake_prefix(tmp_path, script="relay-policy-server", executable=False)
    with pytest.raises(DemoError) as info:
        installed_executable()
    assert str(info.value).startswith(f"{script} is not executable;")


@pytest.mark.ros
def test_installed_executable_without_ament_index_python(monkeypatch):
    # A None entry in sys.modules makes the import fail as on a machine without ROS.
    monkeypatch.setitem(sys.modules, "ament_index_python.packages", None)
    with pytest.raises(DemoError) as info:
        installed_executable("relay-ros")
    assert str(info.value) == (
        "cannot find 'relay-ros': ament_index_python is not importable; "
        "source your ROS 2 install (source /opt/ros/<distro>/setup.bash)"
    )


# --------------------------------------------------------------------------- colcon


def _colcon() -> str:
    """The colcon next to this Python (the .venv), else the one on PATH."""
    beside = Path(sys.executable).with_name("colcon")
    if beside.is_file():
        return str(beside)
    found = shutil.which("colcon")
    if found is None:
        pytest.fail("colcon not found; `make setup` installs it (requirements/test.txt)")
    return found


def _colcon_env(workspace: Path) -> dict[str, str]:
    env = dict(os.environ)
    # No user defaults or mixins, no desktop pop-ups, no pytest options of an outer run
    # (this test itself may run under `colcon test`).
    env["COLCON_HOME"] = str(workspace / "colcon_home")
    env["COLCON_EXTENSION_BLOCKLIST"] = "colcon_core.event_handler.desktop_notification"
    for name in ("COLCON_DEFAULTS_FILE", "PYTEST_ADDOPTS", "COLCON_LOG_PATH"):
        env.pop(name, None)
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(cmd)} exited {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    return done.stdout


def _junit_counts(path: Path) -> dict[str, int]:
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return {
        key: sum(int(suite.get(key, 0)) for suite in suites)
        for key in ("tests", "errors", "failures", "skipped")
    }


@pytest.mark.slow
@pytest.mark.ros
# A colcon build and a colcon test: a minute idle, several on a loaded machine (the
# 120 s of the other tests is a bound for a hang, which this is not).
@pytest.mark.timeout(900)
def test_colcon_build_and_test(tmp_path):
    workspace = tmp_path / "ws"
    source = workspace / "src" / PACKAGE
    # A copy, so that the build never writes into the checkout; no venvs, caches, .git.
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".*", "__pycache__", "*.egg-info", "build", "install", "log", "demo_output",
            "_generated",
        ),
    )  # fmt: skip
    colcon = _colcon()
    env = _colcon_env(workspace)

    listed = _run([colcon, "list", "--base-paths", "src"], workspace, env)
    assert listed.split() == [PACKAGE, f"src/{PACKAGE}", "(ros.ament_python)"]

    _run([colcon, "build", "--base-paths", "src", "--event-handlers", "console_direct-"],
         workspace, env)  # fmt: skip
    install = workspace / "install" / PACKAGE
    share = install / "share" / PACKAGE
    assert (share / "package.xml").read_bytes() == (ROOT / "package.xml").read_bytes()
    launch_files = sorted(p.name for p in (ROOT / "launch").glob("*.launch.py"))
    assert sorted(p.name for p in (share / "launch").iterdir()) == launch_files
    assert {"demo.launch.py", "policy.launch.py"} <= set(launch_files)
    configs = sorted(
        p.name for p in (ROOT / "config").iterdir() if p.suffix in (".yaml", ".xml", ".urdf")
    )
    assert sorted(p.name for p in (share / "config").iterdir()) == sorted([*configs, "layouts"])
    layouts = sorted(p.name for p in (ROOT / "config" / "layouts").glob("*.yaml"))
    assert sorted(p.name for p in (share / "config" / "layouts").iterdir()) == layouts
    # The seeds' examples/demo.py, for a robot with only the colcon install.
    assert (share / "examples" / "demo.py").read_bytes() == (ROOT / "examples/demo.py").read_bytes()
    marker = install / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE
    assert marker.is_file()
    scripts = _console_scripts()
    assert set(scripts) >= {"policy_node", "relay-policy-server", "relay-ros"}
    for script in scripts:
        path = install / "lib" / PACKAGE / script
        assert path.is_file() and os.access(path, os.X_OK), f"{path} missing or not executable"

    # What `ros2 run` / demo.launch.py see after `source install/setup.bash`: the
    # ament index finds the installed server, and the installed scripts run.
    (site,) = (install / "lib").glob("python3*/site-packages")
    run_env = dict(env)
    run_env["AMENT_PREFIX_PATH"] = str(install)
    run_env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    found = _run(
        [sys.executable, "-c",
         "import relay_ros, sys\n"
         "from relay_ros.demo.launch_plan import installed_executable\n"
         "print(relay_ros.__file__)\n"
         "print(installed_executable())"],
        workspace, run_env,
    ).split()  # fmt: skip
    assert found == [
        str(site / PACKAGE / "__init__.py"),
        str(install / "lib" / PACKAGE / "relay-policy-server"),
    ]
    for script in ("relay-policy-server", "relay-ros"):
        usage = _run([str(install / "lib" / PACKAGE / script), "--help"], workspace, run_env)
        assert "usage:" in usage

    # colcon test runs pytest (not unittest's "Ran 0 tests"). A cheap subset: the fast
    # tests of this file (the slow one would build again).
    _run(
        [colcon, "test", "--base-paths", "src", "--event-handlers", "console_direct-",
         "--return-code-on-test-failure",
         "--pytest-args", "test/test_packaging.py", "-m", "not slow"],
        workspace, env,
    )  # fmt: skip
    junit = workspace / "build" / PACKAGE / "pytest.xml"
    assert junit.is_file(), (
        "colcon test did not run pytest (no build/relay_ros/pytest.xml): it does not see "
        'pytest in setup.py\'s extras_require["test"] and fell back to unittest'
    )
    counts = _junit_counts(junit)
    assert counts["errors"] == 0 and counts["failures"] == 0, counts
    assert counts["tests"] - counts["skipped"] > 0, counts
