"""Triage of a mismatch: the ladder of sibling backends and per-node/ETDump divergence, and the per-layer quantization table."""
