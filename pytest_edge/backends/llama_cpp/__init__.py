"""llama.cpp through llama-cpp-python: GGUF decoders (decoders only)."""
