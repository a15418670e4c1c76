"""``python -m queen_sync``: the ``queen-sync`` command line (see :mod:`queen_sync.cli`)."""

import sys

from .cli import main

sys.exit(main())
