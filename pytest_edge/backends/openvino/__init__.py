"""OpenVINO: IR, ONNX and .tflite on the CPU plugin, reduced-precision variants."""
