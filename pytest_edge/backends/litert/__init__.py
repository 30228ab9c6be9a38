"""LiteRT (ai-edge-litert or tflite-runtime): .tflite with and without the XNNPACK delegate."""
