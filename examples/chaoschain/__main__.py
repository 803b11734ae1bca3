"""``python -m examples.chaoschain``: the end-to-end demo (see :mod:`.demo`)."""

from __future__ import annotations

import sys

from .demo import main

sys.exit(main())
