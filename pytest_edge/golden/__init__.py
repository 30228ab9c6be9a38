"""Golden outputs: the file layout and its types (:mod:`.layout`), the validation of untrusted
golden files (:mod:`.validate`), the store that reads and writes them (:mod:`.store`), the golden
sets of a session (:mod:`.sets`), which sets the tests use (:mod:`.use`) and the obtained outputs
of a mismatch (:mod:`.obtained`)."""

from .layout import DEFAULT_SET, Golden, GoldenCase, check_set_key, input_key, set_label, unused_sets
from .store import GoldenStore

__all__ = ["DEFAULT_SET", "Golden", "GoldenCase", "GoldenStore", "check_set_key", "input_key", "set_label",
           "unused_sets"]
