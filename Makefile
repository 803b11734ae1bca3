# The two commands of the README. Everything the project needs is installed from here:
# the Python package with its extras from PyPI, the real peers (anvil, arlocal, solc)
# from npm. Nothing else is downloaded.
PY ?= python3

.PHONY: demo install test check bench

demo:  ## install, then run the payout example and the ChaosChain example (anvil + arlocal) on SQLite
	$(PY) -m pip install -q -e '.[postgres,ethereum,arweave]'
	npm install --no-audit --no-fund --loglevel=error
	$(PY) -m examples.payouts
	$(PY) -m examples.chaoschain

install:  ## install the package with every extra, and the npm peers
	$(PY) -m pip install -q -e '.[dev,bench]'
	npm install --no-audit --no-fund --loglevel=error

test: install  ## install everything and run every test
	$(PY) -m pytest -q

check:  ## types and lint
	$(PY) -m mypy
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

bench: install  ## every benchmark, against raw SQL and the peers (~20 min)
	$(PY) -m bench core
	$(PY) -m bench dag
	$(PY) -m bench signals
	$(PY) -m bench inbox
	$(PY) -m bench chain
