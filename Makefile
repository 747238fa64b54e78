# relay_ros developer entry points. Everything installs into .venv; nothing is
# expected on the machine beyond python3 (3.10-3.12) with venv and pip.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.relay_ros-setup
# openpi's own server and client (numpy<2) for the interop test, in a venv of their own.
OPENPI_VENV ?= .venv-openpi
OPENPI_STAMP := $(OPENPI_VENV)/.relay_ros-openpi
DURATION ?= 20
MODEL ?= pi05
# make demo LINK=wan ENCODING=jpeg: the link emulator between node and server (docs/network.md).
LINK ?=
ENCODING ?=
# make demo LAYOUT=droid: an openpi layout (docs/demo.md); LORA=name: a LoRA adapter.
LAYOUT ?=
LORA ?=
# make demo RECORD=dir: record each run as an episode of a LeRobot dataset (docs/recording.md).
RECORD ?=
PYTEST_ARGS ?=
# pytest-xdist workers for make test (each its own DDS domain, test/conftest.py); 0 = one process.
PYTEST_WORKERS ?= 2

.PHONY: setup test lint format demo bench clean compat openpi-venv

setup: $(STAMP)

$(STAMP): setup.py requirements/ros.txt requirements/runtime.txt requirements/test.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements/ros.txt -r requirements/runtime.txt -r requirements/test.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

openpi-venv: $(OPENPI_STAMP)

$(OPENPI_STAMP): requirements/openpi.txt
	test -x $(OPENPI_VENV)/bin/python || $(PYTHON) -m venv $(OPENPI_VENV)
	$(OPENPI_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(OPENPI_VENV)/bin/python -m pip install --quiet -r requirements/openpi.txt
	touch $(OPENPI_STAMP)

# ruff, then mypy over relay_ros/ (its settings: pyproject.toml [tool.mypy]).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The whole suite in .venv and, at the same time, the ROS-free part on Python 3.10 +
# NumPy 1.x and Python 3.12 + NumPy 2.x (docs/compat.md), because users run both.
# Most of the suite waits on real time (DDS, sockets, subprocesses), so the runs
# overlap well on 2 cores; compat's output is held and shown after pytest's.
test: setup lint $(OPENPI_STAMP)
	@log=$$(mktemp); start=$$(date +%s); \
	.ci/compat >"$$log" 2>&1 & compat=$$!; \
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS); tests=$$?; \
	wait $$compat; compat_status=$$?; \
	echo "[make test] pytest exit $$tests, compat exit $$compat_status, $$(( $$(date +%s) - start )) s"; \
	cat "$$log"; rm -f "$$log"; \
	test $$tests -eq 0 && test $$compat_status -eq 0

demo: setup
	$(PY) -m relay_ros.demo --model $(MODEL) --duration $(DURATION) $(if $(LINK),--link $(LINK)) $(if $(ENCODING),--image-encoding $(ENCODING)) $(if $(LAYOUT),--layout $(LAYOUT)) $(if $(LORA),--lora $(LORA)) $(if $(RECORD),--record $(RECORD))

bench: setup
	$(PY) bench/client_roundtrip.py
	$(PY) bench/pipeline.py
	$(PY) bench/boundaries.py
	$(PY) bench/motion.py

# ROS-free tests on Python 3.10 + NumPy 1.x and Python 3.12 + NumPy 2.x (docs/compat.md).
compat:
	.ci/compat

clean:
	rm -rf $(VENV) $(OPENPI_VENV) .venv-compat-py310 .venv-compat-py312 .bench-venv build install log *.egg-info .pytest_cache .ruff_cache .mypy_cache demo_output
