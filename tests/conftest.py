import os

from hypothesis import HealthCheck, settings

pytest_plugins = [
    "tests.plugins.stores",
    "tests.plugins.anvil",
    "tests.plugins.arlocal",
    "tests.plugins.throwaway_pg",
]

# Hypothesis profiles: `dev` explores more locally, `ci` is sized for the 90-minute CI run.
# `ci` is derandomized: CI explores the same 40 examples every run, so a red CI is a
# regression, never a lucky draw; `dev` explores new ones each run.
settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(
    os.environ.get("SWF_HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")
)
