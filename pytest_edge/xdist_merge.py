"""pytest-xdist's channel, both ends: what a worker sends the controller at its session's end (its
records and measurement state, and the golden references of the tests it collected), and the
controller's plugin that gathers them (registered only with xdist). The plugin's hooks call these."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from .golden.use import USE_KEY, GoldenUse, collection_complete, golden_references
from .parametrize import item_plan
from .stash import edge_session

if TYPE_CHECKING:
    from .run.session import EdgeSession


def send_to_controller(session: pytest.Session, edge: "EdgeSession") -> None:
    """An xdist worker's end: its state and, where its collection was complete, the golden
    references of its tests (every worker collects every test: they are the whole run's)."""
    config = session.config
    config.workeroutput["edge_state"] = json.dumps(edge.state_json())
    use = config.stash[USE_KEY]
    complete = collection_complete(config, use) and bool(edge.store.all_sets())
    refs = sorted(golden_references(edge.golden, session.items, item_plan)) if complete else []
    config.workeroutput["edge_golden_use"] = json.dumps({"complete": complete, "refs": refs})


class XdistMerge:
    """Controller side of pytest-xdist: gather every worker's records and golden references
    (registered only with xdist)."""

    def __init__(self, config: pytest.Config, use: GoldenUse) -> None:
        self.config = config
        self.use = use

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {})
        state = output.get("edge_state")
        if state:
            edge_session(self.config).merge_state_json(json.loads(state))
        golden_use = json.loads(output.get("edge_golden_use") or '{"complete": false}')
        if golden_use.get("complete"):
            self.use.worker_refs.append({(str(m), str(k)) for m, k in golden_use.get("refs", [])})
        else:  # a worker that died, or one whose collection left tests out
            self.use.workers_partial = True
