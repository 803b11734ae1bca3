"""Benchmarks of statemachine_wf (``python -m bench core``); see bench/README.md."""
