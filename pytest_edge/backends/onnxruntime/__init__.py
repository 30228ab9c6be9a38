"""ONNX Runtime: the CPU and other execution providers, its decoder LLMs, per-node intermediates, mobile EP prediction."""
