"""Arm Ethos-U microNPUs (U55, U65, U85): compile-time targets, int8 .tflite compiled by vela."""
