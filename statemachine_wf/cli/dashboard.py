"""``statemachine-wf dashboard``: the web dashboard (:mod:`statemachine_wf.dashboard`)
over the store of ``--db``, served by uvicorn on 127.0.0.1 unless ``--host`` says
otherwise; read-only unless given an operator token (``--operator-token`` or
``SWF_OPERATOR_TOKEN``, read by :class:`~statemachine_wf.definition.config.Config`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..core.store import Store
from ..definition.workflow import Workflow


def dashboard(
    store: Store, workflows: list[type[Workflow[Any, Any]]], args: argparse.Namespace
) -> None:
    # Imported here, not at the top: the dashboard's packages are an extra, and every
    # other command must work without them.
    try:
        import uvicorn

        from ..dashboard.app import create_app
    except ImportError as exc:  # the extra is not installed
        raise ValueError(
            "the dashboard needs the 'dashboard' extra: "
            f"pip install 'statemachine_wf[dashboard]' ({exc})"
        ) from exc
    app = create_app(
        store,
        operator_token=args.operator_token,
        workflows=workflows,
        session_max_age=args.session_max_age,
    )
    mode = "operator actions enabled" if args.operator_token else "read-only"
    print(f"dashboard on http://{args.host}:{args.port}/ ({mode})", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
