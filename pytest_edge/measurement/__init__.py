"""Measurement: the timing and memory primitives a worker uses (:mod:`.timing`), one measurement at a
time per machine (:mod:`.lock`), the statistics of per-process figures (:mod:`.stats`), the
regressions against a baseline (:mod:`.regressions`) and the merge gate (:mod:`.gate`)."""
