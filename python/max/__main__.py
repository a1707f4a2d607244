"""``python -m max``: the ``max`` command."""

import sys

from max.entrypoints.cli import main

sys.exit(main())
