"""Core layer: the pure decisions, and the store port above them.

``fold``, ``decide``, ``waits``, ``progress``, ``audit`` and ``dag_interpret`` are pure:
no I/O, no clock, no randomness (``now`` is passed in). ``records``, ``ports`` and
``store`` are the store port: the records and the role protocols a store implements.
May import the definition layer only.
"""
