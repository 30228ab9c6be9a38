"""Where the plugin keeps its session on pytest's config: shared by the ``edge`` and ``edge_llm``
plugins, so neither imports the other for it."""

from __future__ import annotations

import pytest

from .core.session import EdgeSession

SESSION_KEY = pytest.StashKey[EdgeSession]()
