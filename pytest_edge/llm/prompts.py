"""The prompts of an ``edge_llm`` test, checked before any runtime sees them."""

from __future__ import annotations

from typing import Sequence

from ..backends.decoder_config import LlmConfig
from ..errors import EdgeUsageError


def check_prompt(prompt: Sequence[int], new_tokens: int, config: LlmConfig, where: str) -> list[int]:
    """The prompt as ints, refused before any runtime sees it: empty, an id out of the vocabulary,
    or longer (with the new tokens) than the model's context."""
    ids = [int(t) for t in prompt]
    if not ids:
        raise EdgeUsageError(f"{where}: an empty prompt (at least one token id is needed)")
    bad = [t for t in ids if not 0 <= t < config.vocab_size]
    if bad:
        raise EdgeUsageError(f"{where}: token id {bad[0]} is outside the vocabulary [0, {config.vocab_size})")
    if len(ids) + new_tokens > config.max_context:
        raise EdgeUsageError(f"{where}: the prompt's {len(ids)} tokens + {new_tokens} new tokens = "
                             f"{len(ids) + new_tokens} exceed the model's maximum context of {config.max_context}")
    return ids
