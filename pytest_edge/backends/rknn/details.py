"""What an rknn target adds to the record's ``runtime`` block (``LoadedModel.runtime_details``): the
platform, the build's options as the record keeps them, the ``.rknn``'s size, when it was built
and where it ran. Codec types: written flat after the block's own keys, each key in this order."""

from __future__ import annotations

from dataclasses import dataclass

from ... import codec
from ..base import RuntimeDetails


def _none(value: object) -> bool:
    return value is None


@dataclass(frozen=True)
class CalibrationFigures:
    """What an int8 build was calibrated on: how many samples (None: the first run's inputs, not yet
    known at load) and where they came from."""

    samples: int | None
    source: str


@dataclass(frozen=True)
class BuildOptions:
    """The toolkit's build as the record keeps it: ``do_quantization`` and, of the rest, only the keys
    of one kind of build (a float16 one, an imported quantization, or an int8 one calibrated here)."""

    do_quantization: bool
    quantization: str | None = codec.json_field(default=None, omit=_none)  # the model's own, imported
    float_dtype: str | None = codec.json_field(default=None, omit=_none)
    quantized_dtype: str | None = codec.json_field(default=None, omit=_none)
    quantized_algorithm: str | None = codec.json_field(default=None, omit=_none)
    quantized_method: str | None = codec.json_field(default=None, omit=_none)
    calibration: CalibrationFigures | None = codec.json_field(default=None, omit=_none)


@dataclass(frozen=True)
class RknnDetails(RuntimeDetails):
    """The record's runtime details of an rknn target's model."""

    target_platform: str
    build: BuildOptions
    rknn_bytes: int | None  # None until built (an int8 build waiting for its first run's inputs)
    built: str  # "at load" or "at the first run (calibrated on its inputs)"
    executed: str  # where the model ran: the simulator, in words
