"""Adapters: what talks to the outside world (Ethereum, Arweave).

Installed as ``statemachine_wf.adapters``; the repository keeps the folder at its top
level so that the layering shows: ``statemachine_wf``'s core never imports it.
"""

if __name__ != "statemachine_wf.adapters":  # pragma: no cover - a wrong import path
    raise ImportError(
        f"import this package as 'statemachine_wf.adapters', not {__name__!r}: two import"
        " names would make two copies of every class (an error raised under one name would"
        " not be caught under the other)"
    )
