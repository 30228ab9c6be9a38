"""Golden outputs: the file layout and its types (:mod:`.layout`), the validation of untrusted
golden files (:mod:`.validate`), the store that reads and writes them (:mod:`.store`), the golden
sets of a session (:mod:`.sets`), which sets the tests use (:mod:`.use`) and the obtained outputs
of a mismatch (:mod:`.obtained`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .layout import (DEFAULT_SET, Golden, GoldenCase, GoldenMeta, GoldenReference, GoldenSignature, check_set_key,
                         input_key, set_label, unused_sets)
    from .store import GoldenStore

__all__ = ["DEFAULT_SET", "Golden", "GoldenCase", "GoldenMeta", "GoldenReference", "GoldenSignature", "GoldenStore",
           "check_set_key", "input_key", "set_label", "unused_sets"]


def __getattr__(name: str) -> Any:
    # Imported on first use: every pytest session registers .use, and one without edge tests must
    # not import NumPy (.layout, .store) for it.
    if name == "GoldenStore":
        from .store import GoldenStore

        return GoldenStore
    if name in __all__:
        from . import layout

        return getattr(layout, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
