# The two commands of the README. Everything the project needs is installed from here,
# into the project's own virtual environment (.venv): the Python package with its extras
# from PyPI, the real peers (anvil, arlocal, solc) from npm. Nothing else is downloaded.
PY ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python

.PHONY: demo install test check bench venv contracts

$(VPY):
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

venv: $(VPY)

demo: venv  ## install, then run the payout example and the ChaosChain example (anvil + arlocal) on SQLite
	$(VPY) -m pip install -q -e '.[postgres,ethereum,arweave,dag]'
	npm install --no-audit --no-fund --loglevel=error
	$(MAKE) contracts
	$(VPY) -m examples.payouts
	$(VPY) -m examples.token_payout
	$(VPY) -m examples.chaoschain

# npm install, not npm ci: npm ci refuses a lock that lacks anvil's builds for other
# platforms, which the registry here did not always serve (the committed lock now lists
# them); npm install leaves the committed lock as it is
# (tests/acceptance/test_installed_package.py checks that).
install: venv  ## install the package with every extra, the npm peers, and Debian's chromium for the dashboard's browser tests
	$(VPY) -m pip install -q -e '.[dev,bench]'
	command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y --no-install-recommends chromium chromium-driver; }
	npm install --no-audit --no-fund --loglevel=error
	$(MAKE) contracts

contracts:  ## compile examples/contracts/*.sol with the pinned solc from npm (deterministic: the committed artifacts)
	npm run --silent build:contracts

test: install  ## install everything and run every test
	$(VPY) -m pytest -q

check:  ## types and lint
	$(VPY) -m mypy
	$(VPY) -m ruff check .
	$(VPY) -m ruff format --check .

bench: install  ## every benchmark, against raw SQL and the peers (~20 min)
	$(VPY) -m bench core
	$(VPY) -m bench dag
	$(VPY) -m bench signals
	$(VPY) -m bench inbox
	$(VPY) -m bench chain
