"""Reconcilers: read external truth (Ethereum, Arweave) and return verdicts with evidence.

A workflow's ``@reconcile`` hook calls them and turns the verdict into a transition;
the evidence goes into the log as ``RECONCILED``. They never write anything.

Installed as ``statemachine_wf.reconcilers``; the repository keeps the folder at its top
level so that the layering shows: ``statemachine_wf``'s core never imports it.
"""

if __name__ != "statemachine_wf.reconcilers":  # pragma: no cover - a wrong import path
    raise ImportError(
        f"import this package as 'statemachine_wf.reconcilers', not {__name__!r}: two import"
        " names would make two copies of every class"
    )
