"""``python -m pytest_edge``: the same as the ``pytest-edge`` command."""

import sys

from .cli import main

sys.exit(main())
