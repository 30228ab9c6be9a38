"""A decoder's configuration (``<stem>.json`` beside its artifacts): what the bounds checks and the
KV-cache estimate read."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import EdgeUsageError

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1}


@dataclass(frozen=True)
class LlmConfig:
    vocab_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    max_context: int
    dtype: str = "float32"  # of the KV cache

    @classmethod
    def load(cls, path: Path) -> "LlmConfig":
        """Read ``path``; a missing file or key is an EdgeUsageError naming the file."""
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise EdgeUsageError(f"{path}: no LLM configuration (a JSON file beside the model with "
                                 f"{', '.join(f.name for f in fields(cls))})") from None
        except (OSError, ValueError) as exc:
            raise EdgeUsageError(f"{path}: unreadable LLM configuration: {exc}") from None
        known = {f.name for f in fields(cls)}
        missing = sorted(known - {"dtype"} - set(data))
        if missing:
            raise EdgeUsageError(f"{path}: LLM configuration lacks {', '.join(missing)}")
        if data.get("dtype", "float32") not in DTYPE_BYTES:
            raise EdgeUsageError(f"{path}: dtype {data['dtype']!r} is not one of {', '.join(DTYPE_BYTES)}")
        config = cls(**{k: v for k, v in data.items() if k in known})
        if config.n_heads % config.n_kv_heads:
            raise EdgeUsageError(f"{path}: n_heads {config.n_heads} is not a multiple of n_kv_heads {config.n_kv_heads}")
        return config

    def kv_cache_bytes(self, tokens: int, batch: int = 1) -> int:
        """M_KV = 2 (K and V) x layers x batch x tokens x kv_heads x head_dim x bytes."""
        return 2 * self.n_layers * batch * tokens * self.n_kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]


def config_path(artifact: Path) -> Path:
    return Path(artifact).with_suffix(".json")
