"""``python -m pytest_edge.cli``: the ``pytest-edge`` command."""

import sys

from . import main

sys.exit(main())
