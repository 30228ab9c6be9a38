"""``@pytest.mark.edge_llm(model=..., prompts=..., **budgets)``: parsed once at collection into an
:class:`LlmSpec`; an unknown keyword or a bad value is an EdgeUsageError naming it. The budgets are
rows of :data:`pytest_edge.checks.BUDGETS` (those of ``EDGE_LLM``), parsed by the table's parsers. Its
prompts are checked against the model's configuration (:func:`check_prompt`) before any runtime
sees them."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
import operator
import os
from typing import Any, Iterable, Mapping, Sequence

from ..backends.decoder_config import LlmConfig
from ..checks import CONTEXT_BUDGET, EDGE_LLM, MEMORY_BUDGET, Check, budgets_for, budgets_of
from ..errors import EdgeUsageError
from ..units import parse_bounded_int, parse_int, parse_mb, parse_number, shown


@dataclass(frozen=True)
class LlmSpec:
    model: str
    prompts: tuple[tuple[int, ...], ...]
    new_tokens: int = 16
    min_token_agreement: float | None = 1.0  # None: not judged (a tolerances= entry may say so for one backend)
    logits_atol: float | None = 1e-3  # first-step logits, another runtime of the same float network
    logits_cosine: float | None = None
    contexts: tuple[int, ...] | None = None  # lengths to sweep (default: doubling up to the cap)
    context_cap: int | None = None  # highest length the doubling probe tries (default: the model's maximum)
    memory_limit_mb: float | None = None  # the sweep's processes may map this much more than the runtime alone
    backends: tuple[str, ...] | None = None
    skip_backends: tuple[str, ...] = ()
    warmup: int = 2
    runs: int = 5
    threads: int = 1
    # The model whose goldens this one is judged against (a quantized export against the float one):
    # its goldens are read, and recorded from its own artifact; this model's outputs never become one.
    reference: str | None = None
    # Per backend (a name, or BACKEND@DEVICE), the accuracy keywords that backend is judged by instead
    # (a GGUF's f16 beside an fp32 ONNX): ((backend, ((keyword, value), ...)), ...), parsed; None: off there.
    tolerances: tuple[tuple[str, tuple[tuple[str, float | None], ...]], ...] = ()
    # The budgets this marker sets, by keyword: rows of checks.BUDGETS (those of EDGE_LLM), parsed by
    # the row's own parser ((keyword, value), ...; hashable, as the spec is); budget(keyword) reads one.
    budget_values: tuple[tuple[str, float | None], ...] = ()  # None: switched off by a tolerances= entry

    def budget(self, keyword: str) -> float | None:
        """The value this marker gives the budget ``keyword`` (a row of checks.BUDGETS); None: not set."""
        if keyword not in BUDGET_KEYWORDS:
            raise KeyError(f"{keyword!r} is no budget of the edge_llm marker")
        return dict(self.budget_values).get(keyword)

    def for_backend(self, backend: str) -> "LlmSpec":
        """This spec as ``backend`` is judged: its tolerances= entry (``BACKEND@DEVICE``'s, else the
        runtime's) over the marker's keywords."""
        entries = dict(self.tolerances)
        entry = dict(entries.get(backend, entries.get(backend.partition("@")[0], ())))
        if not entry:
            return self
        budgets = {key: entry.pop(key) for key in list(entry) if key in BUDGET_KEYWORDS}
        return replace(self, **entry, budget_values=tuple({**dict(self.budget_values), **budgets}.items()))

    @property
    def needs_measurement(self) -> bool:
        return any(self.budget(budget.keyword) is not None for budget in budgets_for(EDGE_LLM)
                   if budget.measured) or self.needs_context_sweep

    def budgets(self, check: Check) -> dict[str, float | None]:
        """This marker's budgets that ``check`` judges (``checks.check_generation``)."""
        return budgets_of(check, self.budget)

    def check_context_budget(self, config: LlmConfig, where: str) -> None:
        """A longest-stable-context budget beyond the model's maximum context is refused before
        anything runs, as contexts= beyond it is: no length the sweep can try reaches it."""
        longest = self.budget(CONTEXT_BUDGET)
        if longest is not None and longest > config.max_context:
            raise EdgeUsageError(f"{where}: {CONTEXT_BUDGET}={longest} exceeds the model's maximum context of "
                                 f"{config.max_context}; no context the sweep can try reaches it")

    @property
    def sweep_memory_mb(self) -> float | None:
        """The memory budget each length of the context sweep must stay within (``peak_memory_mb``)."""
        return self.budget(MEMORY_BUDGET)

    @property
    def needs_context_sweep(self) -> bool:
        return self.budget(CONTEXT_BUDGET) is not None or self.contexts is not None


def _prompts(value: Any) -> tuple[tuple[int, ...], ...]:
    if callable(value):
        try:
            value = value()
        except Exception as exc:  # the user's code: its failure is this test's error, named
            raise EdgeUsageError(f"edge_llm prompts=: the callable {getattr(value, '__name__', value)!r} raised "
                                 f"{type(exc).__name__}: {shown(str(exc), 200)}") from None
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


def check_prompt(prompt: Sequence[int], new_tokens: int, config: LlmConfig, where: str) -> list[int]:
    """The prompt as ints, refused before any runtime sees it: empty, an id out of the vocabulary,
    or longer (with the new tokens) than the model's context."""
    try:  # ints or NumPy integers, in any iterable but a string; not floats, bools or nested lists
        if isinstance(prompt, (str, bytes)) or any(isinstance(t, bool) for t in prompt):
            raise TypeError
        ids = [operator.index(t) for t in prompt]
    except TypeError:
        raise EdgeUsageError(f"{where}: a prompt is one list of int token ids, not {shown(prompt, 80)}") from None
    if not ids:
        raise EdgeUsageError(f"{where}: an empty prompt (at least one token id is needed)")
    bad = [t for t in ids if not 0 <= t < config.vocab_size]
    if bad:
        raise EdgeUsageError(f"{where}: token id {bad[0]} is outside the vocabulary [0, {config.vocab_size})")
    if len(ids) + new_tokens > config.max_context:
        raise EdgeUsageError(f"{where}: the prompt's {len(ids)} tokens + {new_tokens} new tokens = "
                             f"{len(ids) + new_tokens} exceed the model's maximum context of {config.max_context}")
    return ids


BUDGET_KEYWORDS = tuple(budget.keyword for budget in budgets_for(EDGE_LLM))


def parse_llm_marker(args: Sequence[Any], kwargs: Mapping[str, Any]) -> LlmSpec:
    known = {f.name for f in fields(LlmSpec) if f.name != "budget_values"} | set(BUDGET_KEYWORDS)
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
    if isinstance(kwargs["model"], os.PathLike):
        kwargs["model"] = os.fspath(kwargs["model"])
    if not isinstance(kwargs["model"], str) or not kwargs["model"].strip():
        raise EdgeUsageError(f"edge_llm model={shown(kwargs['model'])}: expected a model's name, path or export "
                             "folder (a str)")
    kwargs["prompts"] = _prompts(kwargs["prompts"])
    if kwargs.get("tolerances") is not None:
        kwargs["tolerances"] = _tolerances(kwargs["tolerances"])
    if kwargs.get("reference") is not None and (not isinstance(kwargs["reference"], str) or not kwargs["reference"]):
        raise EdgeUsageError(f"edge_llm reference={kwargs['reference']!r}: a model, as model= names one")
    _parse_values(kwargs)
    for name in ("backends", "skip_backends", "contexts"):
        if kwargs.get(name) is not None:
            value = kwargs[name]
            if not isinstance(value, (str, int)) and not isinstance(value, Iterable):
                raise EdgeUsageError(f"edge_llm {name}={shown(value)}: expected a list")
            kwargs[name] = (value,) if isinstance(value, (str, int)) else tuple(value)
    for name in ("backends", "skip_backends"):
        if kwargs.get(name) is not None and not all(isinstance(n, str) and n for n in kwargs[name]):
            raise EdgeUsageError(f"edge_llm {name}={shown(kwargs[name])}: each backend is named by a str, as "
                                 "pytest-edge backends lists them")
    if kwargs.get("contexts") and not all(isinstance(n, int) and not isinstance(n, bool) and n >= 2
                                          for n in kwargs["contexts"]):
        raise EdgeUsageError(f"edge_llm contexts={kwargs['contexts']!r}: lengths are ints of at least 2")
    budgets = tuple((key, kwargs.pop(key)) for key in BUDGET_KEYWORDS if kwargs.get(key) is not None)
    for key in BUDGET_KEYWORDS:
        kwargs.pop(key, None)
    return LlmSpec(**kwargs, budget_values=budgets)




# Each setting's parser: the edge marker's units ("512MB"), finite, non-negative; the int keywords
# ints (the budgets' parsers are their rows'). A memory_limit_mb of 0 would map no memory at all: at least 1 MB.
_SIZES = ("memory_limit_mb",)
_NUMBERS = ("logits_atol", "logits_cosine", "min_token_agreement")
_INTS = {"new_tokens": 1, "context_cap": 2, "warmup": 0, "runs": 1, "threads": 1}
# Upper bounds, each with why (docs/llm.md): a value past them starts threads or runs that no
# measurement needs (threads=10**6: gigabytes of thread stacks per worker, then a crash; runs=10**9:
# the worker's whole request timeout). The worker also stops timed generations after
# worker.server.GENERATION_TIME_CAP_S.
BOUNDS = {"threads": (256, "more intra-op threads than any device has cores"),
          "warmup": (100, "warm-up generations past the first few change nothing"),
          "runs": (1000, "timed generations per process; more processes (edge_processes) say more")}


def tolerance_keywords() -> tuple[str, ...]:
    """What tolerances= may set per backend: the accuracy keywords (not measured), not the timing budgets."""
    return (*_NUMBERS, *(budget.keyword for budget in budgets_for(EDGE_LLM) if not budget.measured))


def _tolerances(tolerances: Any) -> tuple[tuple[str, tuple[tuple[str, float | None], ...]], ...]:
    """``{backend: {keyword: value}}`` checked and parsed as the marker's own keywords are."""
    shape = "edge_llm tolerances: expected {backend: {min_token_agreement: ..., logits_atol: ..., ...}}"
    if not isinstance(tolerances, Mapping):
        raise EdgeUsageError(f"{shape}; got {shown(tolerances)}")
    known = tolerance_keywords()
    parsed = []
    for backend, entry in tolerances.items():
        if not isinstance(backend, str) or not backend or not isinstance(entry, Mapping):
            raise EdgeUsageError(f"{shape}; got {shown(backend)}: {shown(entry)}")
        unknown = [key for key in entry if key not in known]
        if unknown:
            raise EdgeUsageError(f"edge_llm tolerances[{backend!r}]: unknown key(s) {', '.join(map(repr, unknown))}; "
                                 f"known: {', '.join(known)}")
        values = {key: value for key, value in entry.items() if value is not None}
        _parse_values(values, f"edge_llm tolerances[{backend!r}].")
        # None switches the keyword off for this backend (as on the edge marker's tolerances=): a
        # runtime that gives no logits (litert-lm) beside a marker's logits_cosine.
        switched_off = {key: None for key, value in entry.items() if value is None}
        parsed.append((backend, tuple(sorted({**values, **switched_off}.items()))))
    return tuple(parsed)


def _parse_values(kwargs: dict[str, Any], prefix: str = "edge_llm ") -> None:
    """Budgets and settings parsed in place, each error naming its keyword ("edge_llm KEYWORD")."""
    for budget in budgets_for(EDGE_LLM):
        if kwargs.get(budget.keyword) is not None:
            kwargs[budget.keyword] = budget.parse(kwargs[budget.keyword], f"{prefix}{budget.keyword}")
    for key in (*_SIZES, *_NUMBERS, *_INTS):
        if kwargs.get(key) is None:
            continue
        what = f"{prefix}{key}"
        if key in _SIZES:
            kwargs[key] = parse_mb(kwargs[key], what)
        elif key in _NUMBERS:
            kwargs[key] = parse_number(kwargs[key], what)
        elif key in BOUNDS:
            kwargs[key] = parse_bounded_int(kwargs[key], what, _INTS[key], *BOUNDS[key])
        else:
            kwargs[key] = parse_int(kwargs[key], what, _INTS[key])
    if kwargs.get("memory_limit_mb") is not None and kwargs["memory_limit_mb"] < 1:
        raise EdgeUsageError(f"edge_llm memory_limit_mb={kwargs['memory_limit_mb']!r}: at least 1 MB "
                             "(0 would map nothing; leave it out for no limit)")
    for key, high in (("min_token_agreement", 1.0), ("logits_cosine", 1.0)):
        if kwargs.get(key) is not None and kwargs[key] > high:
            raise EdgeUsageError(f"{prefix}{key}={kwargs[key]!r} must be within [0, {high:g}]")
