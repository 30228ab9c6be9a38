"""A decoder's block of the record (``Record.generation``; the report's ``llm`` block)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Mapping

from .. import codec
from .generation_figures import (GENERATION_FIGURE_KEYS, ContextSweep, GenerationFigures, PromptResult,
                                 TeacherForcedOverall)
from .verdicts import TimingNotJudged

if TYPE_CHECKING:
    from ..backends.decoder_config import LlmConfig


@dataclass(frozen=True)
class RecordLlmConfig(codec.StoredBlock):
    """backends.decoder_config.LlmConfig as the record keeps it (the ``llm`` block's ``config``), in
    its keys and order. A stored report's is read leniently: a key an older version did not write is
    None and is not written back, a key of another version is kept (``unknown``) and written after."""

    vocab_size: int | None = codec.optional()
    n_layers: int | None = codec.optional()
    n_heads: int | None = codec.optional()
    n_kv_heads: int | None = codec.optional()
    head_dim: int | None = codec.optional()
    max_context: int | None = codec.optional()
    dtype: str | None = codec.optional()  # of the KV cache
    source: str | None = codec.optional()  # the file it was read from
    sliding_window: int | None = codec.optional()
    sliding_layers: tuple[int, ...] | None = codec.optional()
    sliding_cache: int | None = codec.optional()

    @classmethod
    def of(cls, config: "LlmConfig") -> "RecordLlmConfig":
        """The configuration a decoder was checked with, as the record keeps it: every key."""
        return codec.from_json(cls, codec.to_json(config), "a decoder's configuration")

# The keys of a decoder's block before its measured figures (its spec and accuracy as run).
_GENERATION_RUN = ("config", "new_tokens", "kv_cache", "prompts", "teacher_forced")


@dataclass(frozen=True)
class GenerationRecord:
    """A decoder's part of the record (``Record.generation``; the report's ``llm`` block): its
    configuration, new tokens and how the runtime holds the cache; per prompt the golden's and this
    run's tokens and first-step logits figures; the teacher-forced figures over every prompt; and,
    when measured, the figures of its fresh processes (``measured``: TTFT, TPOT, tokens/s, load,
    memory, per-process figures, the runtime's own counters, written flat in the block), the
    context sweep (``context``) and why an emulator's timing was not judged (``timing_not_judged``).
    The keys of another version's block that this one does not know are kept (``unknown``) and
    written back after the others."""

    config: RecordLlmConfig = field(default_factory=RecordLlmConfig)
    new_tokens: int = 0
    kv_cache: str | None = None  # how the runtime keeps the cache, in words
    prompts: tuple[PromptResult, ...] = ()
    teacher_forced: TeacherForcedOverall | None = codec.json_field(default=None, omit=lambda v: v is None)
    measured: GenerationFigures | None = codec.json_field(default=None, skip=True)  # None: not measured
    context: ContextSweep | None = codec.json_field(default=None, omit=lambda v: v is None)
    timing_not_judged: TimingNotJudged | None = codec.json_field(
        default=None, omit=lambda v: v is None, encode=lambda policy: policy.reason, decode=TimingNotJudged.read)
    unknown: dict[str, Any] = codec.json_field(default_factory=dict, skip=True)

    def to_json(self) -> dict[str, Any]:
        """The block in the report's order: the run's keys, the measured figures, the sweep, the
        policy, then what another version wrote that this one does not know."""
        data = codec.to_json(self)
        if self.measured is not None:
            run = {key: data.pop(key) for key in _GENERATION_RUN if key in data}
            data = {**run, **codec.to_json(self.measured), **data}
        return {**data, **self.unknown}

    @classmethod
    def from_json(cls, data: Any, where: str = "a report's llm block") -> "GenerationRecord":
        """A block of a report (this version's or another's: what it lacks is empty or not
        measured, what this version does not know is kept); ValueError naming ``where`` and the
        field's path for anything that does not fit."""
        if not isinstance(data, Mapping):
            return codec.from_json(cls, data, where)  # says: expected an object
        measured = (codec.from_json(GenerationFigures, data, where)
                    if any(key in data for key in GENERATION_FIGURE_KEYS) else None)
        unknown = {k: v for k, v in data.items() if k not in _GENERATION_KEYS}
        return codec.from_json(cls, data, where, given={"measured": measured, "unknown": unknown})


_GENERATION_KEYS = {f.name for f in fields(GenerationRecord)} - {"measured", "unknown"} | GENERATION_FIGURE_KEYS
