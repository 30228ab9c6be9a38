"""``@pytest.mark.edge_llm(model=..., prompts=..., **budgets)``: parsed once at collection into an
:class:`LlmSpec`; an unknown keyword or a bad value is an EdgeUsageError naming it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

from ..errors import EdgeUsageError

TIMING_BUDGETS = ("ttft_ms", "tpot_ms", "min_decode_tps", "min_prefill_tps", "peak_memory_mb", "max_load_ms")


@dataclass(frozen=True)
class LlmSpec:
    model: str
    prompts: tuple[tuple[int, ...], ...]
    new_tokens: int = 16
    min_token_agreement: float = 1.0
    logits_atol: float | None = 1e-3  # first-step logits, another runtime of the same float network
    logits_cosine: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    min_decode_tps: float | None = None
    min_prefill_tps: float | None = None
    peak_memory_mb: float | None = None
    max_load_ms: float | None = None
    max_context: int | None = None  # budget: the longest stable context must reach this
    contexts: tuple[int, ...] | None = None  # lengths to sweep (default: doubling up to the cap)
    context_cap: int | None = None  # highest length the doubling probe tries (default: the model's maximum)
    memory_limit_mb: float | None = None  # the sweep's processes may map this much more than the runtime alone
    backends: tuple[str, ...] | None = None
    skip_backends: tuple[str, ...] = ()
    warmup: int = 2
    runs: int = 5
    threads: int = 1
    budgets: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def needs_measurement(self) -> bool:
        return any(self.budgets.get(k) is not None for k in TIMING_BUDGETS) or self.needs_context_sweep

    @property
    def needs_context_sweep(self) -> bool:
        return self.max_context is not None or self.contexts is not None


def _prompts(value: Any) -> tuple[tuple[int, ...], ...]:
    if callable(value):
        value = value()
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or not value:
        raise EdgeUsageError(f"edge_llm prompts= must be a non-empty list of token id lists (or a callable "
                             f"returning one), not {value!r}")
    if all(isinstance(t, int) for t in value):  # one prompt given flat
        value = [value]
    prompts = []
    for prompt in value:
        if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence) or \
                not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise EdgeUsageError(f"edge_llm prompts=: each prompt is a list of int token ids (a tokenizer is the "
                                 f"app's business), not {prompt!r}")
        prompts.append(tuple(int(t) for t in prompt))
    return tuple(prompts)


def parse_llm_marker(args: Sequence[Any], kwargs: Mapping[str, Any]) -> LlmSpec:
    known = {f.name for f in fields(LlmSpec)} - {"budgets"}
    kwargs = dict(kwargs)
    if args:
        if len(args) > 1 or "model" in kwargs:
            raise EdgeUsageError("edge_llm takes the model as its one positional argument or model=")
        kwargs["model"] = args[0]
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise EdgeUsageError(f"edge_llm: unknown keyword(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for required in ("model", "prompts"):
        if kwargs.get(required) is None:
            raise EdgeUsageError(f"edge_llm needs {required}=")
    kwargs["prompts"] = _prompts(kwargs["prompts"])
    if not isinstance(kwargs.get("new_tokens", 16), int) or kwargs.get("new_tokens", 16) < 1:
        raise EdgeUsageError(f"edge_llm new_tokens={kwargs['new_tokens']!r} must be an int of at least 1")
    agreement = kwargs.get("min_token_agreement", 1.0)
    if not 0.0 <= agreement <= 1.0:
        raise EdgeUsageError(f"edge_llm min_token_agreement={agreement!r} must be within [0, 1]")
    for name in ("backends", "skip_backends", "contexts"):
        if kwargs.get(name) is not None:
            value = kwargs[name]
            kwargs[name] = (value,) if isinstance(value, (str, int)) else tuple(value)
    if kwargs.get("contexts") and not all(isinstance(n, int) and n >= 2 for n in kwargs["contexts"]):
        raise EdgeUsageError(f"edge_llm contexts={kwargs['contexts']!r}: lengths are ints of at least 2")
    budgets = {k: kwargs.get(k) for k in (*TIMING_BUDGETS, "max_context")}
    return LlmSpec(**kwargs, budgets=budgets)


