"""The first test file ``pytest-edge init`` writes: one ``@pytest.mark.edge`` test per tensor model
(budgets chosen from its signature: a quantized variant of another model against that model's golden
by SNR, int8 outputs within one step, dynamic dimensions skipped with the reason) and one
``@pytest.mark.edge_llm`` test per decoder LLM."""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..backends.decoder_search import FoundDecoder
from ..checks import EDGE, EDGE_LLM, Budget, budgets_for, check_compiled, check_coverage


@dataclass
class Traits:
    """What the first test of a model must know of its signature."""

    dynamic: str = ""  # its inputs' shapes, when a dimension other than the leading one is dynamic
    int8_outputs: list[str] = field(default_factory=list)
    quantized: bool = False  # int8/uint8 arithmetic (float outputs): statistical check
    # Its inputs' (shape, dtype), names aside: a variant is checked against its float model's golden only with the same.
    inputs: tuple = ()
    # The compile-time NPU targets installed here that compile one of its artifacts (an int8 model's).
    npu_targets: tuple[str, ...] = ()


# The first test's SNR floor for an int8 model: triage quant's threshold of a layer that is fine.
QUANTIZED_MIN_SNR_DB = 20
# How exporters and teams name a quantized variant of a model: kws_int8, kws-qdq, kws_q8, kws_quant,
# kws_int8_qdq (optimum, onnxruntime.quantization, ai-edge-torch and ExecuTorch examples use these).
QUANTIZED_SUFFIX = re.compile(r"[_.-](u?int8|qdq|q8|i8|quant|quantized|ptq|qat|w8a8|dynamic_quant)$", re.I)


def budget_hint(rows: Sequence[Budget], lead: str) -> str:
    """``lead`` then each row's keyword as a marker takes it (``KEYWORD=``), with the hint its row gives
    (``max_fallback=0: ...``): the budgets a first test may add, read from the table."""
    return lead + ", ".join(f"{row.keyword}={row.hint}" for row in rows)


def _comment(text: str) -> str:
    return textwrap.fill(text, 100, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False) + "\n"


def quantized_base(stem: str, stems: Sequence[str]) -> str | None:
    """The float model that ``stem`` is the quantized variant of, by name (``kws_int8`` -> ``kws``,
    ``kws_int8_qdq`` -> ``kws``), where the project has it; None otherwise."""
    name = stem
    while (match := QUANTIZED_SUFFIX.search(name)) is not None:
        name = name[:match.start()]
        if name in stems and name != stem:
            return name
    return None


def named_quantized(stem: str) -> bool:
    return QUANTIZED_SUFFIX.search(stem) is not None


def first_test_source(models: Sequence[str], traits: Mapping[str, "Traits"] | None = None) -> str:
    """One edge test per model: outputs against the golden on every backend that can run it. A
    model with dynamic input dimensions is skipped with the reason (its sizes are the user's to
    give, with shapes=; no default would mean anything); one with int8/uint8 outputs gets atol=1
    (one quantization step: delegate and reference kernels may round apart). A quantized variant of
    another model of the project (``kws_int8`` beside ``kws``, same inputs) is checked against that
    model's golden, ``reference="kws"``, by SNR (min_snr_db=20): what quantization costs, on every
    backend; an int8 model without its float model, min_snr_db=20 against its own golden."""
    names: set[str] = set()
    tests = []
    traits = traits or {}
    for model in models:
        name = "test_" + (re.sub(r"\W", "_", model).strip("_") or "model")
        while name in names:
            name += "_"
        names.add(name)
        trait = traits.get(model) or Traits()
        head, budgets = "", ""
        base = quantized_base(model, models)
        theirs = (traits.get(base) or Traits()).inputs if base is not None else ()
        if theirs and trait.inputs and theirs != trait.inputs:
            head += f"# not against {base}'s golden: the inputs differ ({_inputs(trait.inputs)} vs {_inputs(theirs)})\n"
            base = None
        if trait.int8_outputs:
            head += (f"# {', '.join(map(repr, trait.int8_outputs))}: int8/uint8 outputs, which kernels may round "
                     "one quantization step apart\n")
            budgets = ", atol=1"
        elif base is not None:
            head += (f"# the quantized variant of {base}: its outputs against {base}'s golden, by SNR (kernels\n"
                     "# and converters round apart element-wise)\n")
            budgets = f", reference={json.dumps(base)}, min_snr_db={QUANTIZED_MIN_SNR_DB}"
        elif trait.quantized or named_quantized(model):
            head += ("# an int8 model with float outputs: judged by SNR, since kernels (and the int8 artifacts of\n"
                     "# different converters) round apart element-wise\n")
            budgets = f", min_snr_db={QUANTIZED_MIN_SNR_DB}"
        if trait.dynamic:
            reason = (f"{model}: dynamic input dimensions ({trait.dynamic}): give their sizes with shapes= "
                      f"in the marker, then remove this skip and run pytest --edge-update-golden")
            head += f"@pytest.mark.skip(reason={reason!r})\n"
        tests.append(f"\n\n{head}@pytest.mark.edge(model={json.dumps(model)}{budgets})\n"
                     f"def {name}(edge_model):\n    pass\n")
        if trait.npu_targets and not trait.dynamic:
            npu = name + "_npu"
            while npu in names:
                npu += "_"
            names.add(npu)
            compiled = [row for row in budgets_for(EDGE) if row.checks[EDGE] in (check_coverage, check_compiled)]
            tests.append("\n\n" + _comment(f"{model} compiled for the NPU targets installed here: compile-time (the "
                                            "compiler's placement, memory and estimated time; nothing executes). "
                                            + budget_hint(compiled, "Its budgets: ")) +
                         f"@pytest.mark.edge(model={json.dumps(model)}, backends={json.dumps(list(trait.npu_targets))})\n"
                         f"def {npu}(edge_model):\n    pass\n")
    return ('"""Conformance of the project\'s models, written by `pytest-edge init`: edit it freely.\n\n'
            "Each test runs on every installed backend that can load one of the model's artifacts and\n"
            "checks the outputs against the golden outputs (`pytest --edge-update-golden` records them).\n"
            + textwrap.fill(budget_hint(budgets_for(EDGE), "Tolerances and budgets go in the marker: atol=, rtol=, "),
                            100, break_on_hyphens=False) + "\n"
            '"""\n\nimport pytest\n' + "".join(tests))


def _inputs(inputs: tuple) -> str:
    return ", ".join(f"{dtype}{list(shape)}" for shape, dtype in inputs)


def first_llm_test_source(decoders: Sequence[FoundDecoder], taken: set[str]) -> str:
    """One edge_llm test per decoder: greedy tokens against the golden on every LLM runtime that can
    run one of its artifacts. The prompt is token ids (a tokenizer is the app's business), the first
    ids of its vocabulary: the user replaces it with their own."""
    tests = []
    for decoder in decoders:
        name = "test_llm_" + (re.sub(r"\W", "_", decoder.model).strip("_") or "model")
        while name in taken:
            name += "_"
        taken.add(name)
        prompt = [i % decoder.vocab_size for i in range(1, 5)]
        tests.append("\n\n" + _comment(budget_hint(budgets_for(EDGE_LLM), f"{decoder.what}: put your own prompts' "
                                                                          "token ids; budgets: ")) +
                     f"@pytest.mark.edge_llm(model={json.dumps(decoder.model)}, prompts=[{prompt!r}], new_tokens=8)\n"
                     f"def {name}(edge_llm):\n    pass\n")
    return "".join(tests)
