"""Whisper's log-mel features in NumPy, from a ``preprocessor_config.json`` as Hugging Face's
``WhisperFeatureExtractor`` writes it (``feature_size``, ``sampling_rate``, ``n_fft``,
``hop_length``, ``chunk_length``): the audio padded or cut to one window (``chunk_length`` seconds),
a periodic Hann window, a centred STFT with reflect padding, the power spectrum through a
Slaney-normalized filter bank on the Slaney mel scale, ``log10`` clamped at 1e-10, the last frame
dropped, floored at the maximum less 8, then ``(x + 4) / 4``. Runtime-free: every speech runtime
that takes features rather than audio is fed these (fixtures/make_speech.py checks them against
``transformers``' own extractor, tests/test_speech.py against its stored output).

Also the WAV reader of the test audio: 16-bit PCM, mono, at the configuration's rate; any other is
an error naming the file."""

from __future__ import annotations

import json
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class AudioError(ValueError):
    """Audio a speech model cannot take as it is (its rate, channels or sample format), naming the file."""


@dataclass(frozen=True)
class FeatureConfig:
    """What ``preprocessor_config.json`` says about the features (``WhisperFeatureExtractor``'s keys)."""
    feature_size: int = 80
    sampling_rate: int = 16000
    n_fft: int = 400
    hop_length: int = 160
    chunk_length: int = 30

    @property
    def n_samples(self) -> int:
        return self.chunk_length * self.sampling_rate

    @property
    def frames(self) -> int:
        return self.n_samples // self.hop_length

    @classmethod
    def read(cls, path: Path) -> "FeatureConfig":
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable preprocessor configuration: {exc}") from None
        known = {name: data[name] for name in ("feature_size", "sampling_rate", "n_fft", "hop_length", "chunk_length")
                 if name in data}
        missing = [name for name in ("feature_size", "sampling_rate", "n_fft", "hop_length") if name not in known]
        if missing:
            raise ValueError(f"{path}: no {', '.join(missing)} (a WhisperFeatureExtractor's preprocessor_config.json "
                             "has them)")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in known.values()):
            raise ValueError(f"{path}: feature parameters must be positive ints, not {known}")
        return cls(**known)


def _hz_to_mel(freq: np.ndarray) -> np.ndarray:
    """The Slaney mel scale (Auditory Toolbox): linear below 1 kHz, logarithmic above."""
    min_log_hz, min_log_mel, logstep = 1000.0, 15.0, 27.0 / np.log(6.4)
    mels = 3.0 * np.asarray(freq, np.float64) / 200.0
    above = freq >= min_log_hz
    return np.where(above, min_log_mel + np.log(np.maximum(freq, 1e-10) / min_log_hz) * logstep, mels)


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    min_log_hz, min_log_mel, logstep = 1000.0, 15.0, np.log(6.4) / 27.0
    freq = 200.0 * np.asarray(mels, np.float64) / 3.0
    return np.where(mels >= min_log_mel, min_log_hz * np.exp(logstep * (mels - min_log_mel)), freq)


def mel_filters(config: FeatureConfig) -> np.ndarray:
    """[n_fft // 2 + 1, feature_size]: triangular filters between 0 Hz and 8 kHz, equally spaced
    on the Slaney mel scale, each scaled to unit area (``norm="slaney"``)."""
    bins = config.n_fft // 2 + 1
    fft_freqs = np.linspace(0, config.sampling_rate // 2, bins)
    mel_points = np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(8000.0)), config.feature_size + 2)
    filter_freqs = _mel_to_hz(mel_points)
    diff = np.diff(filter_freqs)
    slopes = filter_freqs[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    enorm = 2.0 / (filter_freqs[2:config.feature_size + 2] - filter_freqs[:config.feature_size])
    return filters * enorm[None, :]


def log_mel(audio: np.ndarray, config: FeatureConfig) -> np.ndarray:
    """[1, feature_size, frames] float32 log-mel features of one window of ``audio`` (float samples
    at ``config.sampling_rate``), padded with zeros or cut to ``chunk_length`` seconds."""
    samples = np.zeros(config.n_samples, np.float64)
    audio = np.asarray(audio, np.float64)[:config.n_samples]
    samples[:len(audio)] = audio
    pad = config.n_fft // 2
    padded = np.pad(samples, pad, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(config.n_fft) / config.n_fft)  # periodic Hann
    count = 1 + (len(padded) - config.n_fft) // config.hop_length
    starts = np.arange(count) * config.hop_length
    frames = padded[starts[:, None] + np.arange(config.n_fft)[None, :]] * window
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # [count, n_fft // 2 + 1]
    mel = power @ mel_filters(config)  # [count, feature_size]
    logs = np.log10(np.maximum(mel, 1e-10)).T[:, :-1]
    logs = np.maximum(logs, logs.max() - 8.0)
    return ((logs + 4.0) / 4.0).astype(np.float32)[None]


def read_wav(path: Path, sampling_rate: int) -> np.ndarray:
    """The samples of a 16-bit PCM mono WAV file at ``sampling_rate``, as float32 in [-1, 1)."""
    try:
        with wave.open(str(path), "rb") as wav:
            rate, channels, width, count = wav.getframerate(), wav.getnchannels(), wav.getsampwidth(), wav.getnframes()
            data = wav.readframes(count)
    except FileNotFoundError:
        raise AudioError(f"{path}: no such audio file") from None
    except (OSError, EOFError, wave.Error) as exc:
        raise AudioError(f"{path}: not a readable WAV file: {exc}") from None
    if rate != sampling_rate:
        raise AudioError(f"{path}: sampled at {rate} Hz, the model's features take {sampling_rate} Hz "
                         f"(resample it, e.g. sox IN -r {sampling_rate} OUT)")
    if channels != 1:
        raise AudioError(f"{path}: {channels} channels; the model takes mono audio")
    if width != 2:
        raise AudioError(f"{path}: {8 * width}-bit samples; 16-bit PCM is read")
    if count == 0:
        raise AudioError(f"{path}: holds no samples")
    return (np.frombuffer(data, "<i2").astype(np.float32) / 32768.0)
