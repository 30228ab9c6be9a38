"""pytest-edge: deployment conformance testing of on-device ML models."""

__version__ = "0.1.0"
