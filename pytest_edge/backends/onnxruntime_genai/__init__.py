"""ONNX Runtime GenAI: model builder folders run by its own generator (decoders only)."""
