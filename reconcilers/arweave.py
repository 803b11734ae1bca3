"""External truth on Arweave: what happened to an upload whose id we recorded.

The seed's rule is "Arweave is append-only: if we have an Arweave tx id, the content
exists" — as long as the gateway still knows the id. An id the gateway does not know
(never posted because the runner died first, dropped from the mempool, forked out) is
``not_found``: the step posts the *recorded* transaction again (same signature, same id,
no second payment); it never prepares a new one while an id is recorded.
"""

from __future__ import annotations

from statemachine_wf.adapters.arweave.fate import UploadKind, UploadVerdict, upload_fate

__all__ = ["UploadKind", "UploadVerdict", "upload_fate"]
