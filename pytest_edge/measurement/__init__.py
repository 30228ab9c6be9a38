"""Measurement's primitives, below the worker that uses them: the timing and memory primitives a
worker uses (:mod:`.timing`), what counted mode counts (:mod:`.counts`), the /proc reader
(:mod:`.sensors`), one measurement at a time per machine (:mod:`.lock`) and the statistics of
per-process figures (:mod:`.stats`). The policies and the merge gate built on them are
:mod:`pytest_edge.judging`'s."""
