"""CTranslate2 (faster-whisper's engine): Whisper exports by its own converter (speech only,
edge_asr; docs/speech.md). The recognizer is speech.py, found by backends/speech.py's registry."""
