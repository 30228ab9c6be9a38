"""MNN: .mnn from mnnconvert, CPU and GPU forward types."""
