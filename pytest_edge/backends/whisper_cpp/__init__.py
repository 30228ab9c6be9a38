"""whisper.cpp through pywhispercpp: GGML Whisper files (speech only, edge_asr; docs/speech.md).
The recognizer is speech.py, found by backends/speech.py's registry."""
