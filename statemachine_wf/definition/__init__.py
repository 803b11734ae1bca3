"""Definition layer: what an author writes and hands over.

Workflows and their frozen specs, DAG definitions (models, loading, expressions,
templates), events, limits, retry policies, input checks, options, the one reader of
``SWF_*`` settings (``config``) and log redaction; with ``statemachine_wf.errors``, which
stays where it is because an error's dotted name is stored in the log. The bottom layer:
it imports no other layer of the package.
"""
