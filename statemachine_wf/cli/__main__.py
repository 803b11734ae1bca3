"""``python -m statemachine_wf.cli``: the ``statemachine-wf`` command, run as a module."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
