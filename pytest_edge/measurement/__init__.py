"""Measurement: timing and memory in fresh worker processes, their statistics, and the merge gate."""
