"""Runtime layer: what drives claimed instances.

``operations`` (the version-checked operations and the only CAS-retry loop), the runner's
pool, one driver per kind (``driver`` for state machines, ``dag_executor`` and
``dag_handlers`` for DAG nodes) and the step context. May import the definition and core
layers; never a store implementation, the client layer or the facades.
"""
