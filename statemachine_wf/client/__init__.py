"""Client layer: what producers and operators call.

``machine`` (:class:`Client`, state machines), ``dag`` (``DagClient``), ``inbox``
(redrive, retention), ``live`` (watching a log) and ``signers`` (the per-signer queues,
read from the locks and the holders' progress). May import every layer below it
(definition, core, runtime); never a store implementation or the facades.
"""

from .machine import Client

__all__ = ["Client"]
