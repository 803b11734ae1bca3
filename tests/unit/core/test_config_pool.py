"""The PostgreSQL pool's reconnect settings reach the store through Config (issue 14)."""

from __future__ import annotations

import pytest

from statemachine_wf import Config


def test_pool_settings_from_the_environment_become_store_options() -> None:
    config = Config.from_env(
        {
            "SWF_DATABASE_URL": "postgresql://u@h:5432/d",
            "SWF_PG_SCHEMA": "jobs",
            "SWF_PG_POOL_SIZE": "4",
            "SWF_PG_RUNNER_CONNECTIONS": "3",
            "SWF_PG_DAG_CONNECTIONS": "2",
            "SWF_PG_DAG_STICKY": "0.5",
            "SWF_PG_POOL_TIMEOUT": "5",
            "SWF_PG_RECONNECT_INTERVAL": "0.25",
        }
    )
    assert config.store_options() == {
        "schema": "jobs",
        "pool_size": 4,
        "runner_connections": 3,
        "dag_connections": 2,
        "dag_sticky": 0.5,
        "pool_timeout": 5.0,
        "reconnect_interval": 0.25,
    }
    assert Config().runner_connections == 2  # of the pool's 4: the rest for starts and reads
    assert Config.from_env({"SWF_PG_RUNNER_CONNECTIONS": ""}).runner_connections == 2
    assert Config().dag_connections == 0  # DAG commits share the pool_size connections
    assert Config.from_env({"SWF_PG_DAG_CONNECTIONS": ""}).dag_connections == 0
    assert Config().dag_sticky == 1.0  # a runner's dispatched DAG tasks are its for 1 s
    assert Config.from_env({"SWF_PG_DAG_STICKY": ""}).dag_sticky == 1.0
    assert Config().pool_timeout == 30.0
    assert Config().reconnect_interval == 0.5
    assert Config(database_url="sqlite:///x.db", pool_size=2).store_options() == {}


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("SWF_PG_POOL_SIZE", "0", "pool_size must be >= 1"),
        ("SWF_PG_RUNNER_CONNECTIONS", "0", "runner_connections must be >= 1"),
        ("SWF_PG_DAG_CONNECTIONS", "-1", "dag_connections must be >= 0"),
        ("SWF_PG_DAG_STICKY", "-1", "dag_sticky must be >= 0"),
        ("SWF_PG_DAG_STICKY", "nan", "dag_sticky must be >= 0"),
        ("SWF_PG_POOL_TIMEOUT", "0", "pool_timeout must be > 0"),
        ("SWF_PG_RECONNECT_INTERVAL", "-1", "reconnect_interval must be > 0"),
    ],
)
def test_bad_pool_settings_are_refused_by_name(name: str, value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Config.from_env({name: value})
