"""``python -m examples.token_payout``: the end-to-end demo (see :mod:`.demo`)."""

from __future__ import annotations

import sys

from .demo import main

sys.exit(main())
