"""The quantized exports people ship, made by the field's tools from the float fixtures' weights
(fixtures/make_llm_exports.py), judged teacher-forced against the float export's golden
(docs/llm.md, "Teacher-forced quality"): ONNX Runtime GenAI's ``-p int4``, ExecuTorch's
``export_llama -qmode 8da4w -G 32`` and litert-torch's ``dynamic_int8``. Each passes budgets it
meets, and the same file wrongly quantized fails them: the classic packing bugs, applied to the
export's own quantized weights (4-bit: the two nibbles of each byte swapped; 8-bit: signed weights
read as unsigned, the sign bit flipped). llama.cpp's Q8_0 / Q4_0 are judged in test_llm_quality.py."""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

LLM = Path(__file__).resolve().parent.parent / "fixtures" / "llm"


def swap_nibbles(packed: np.ndarray) -> np.ndarray:
    """4-bit weights packed two to a byte, read with the nibble order reversed."""
    return ((packed & 0x0F) << 4) | (packed >> 4)


def flip_sign_bit(packed: np.ndarray) -> np.ndarray:
    """int8 weights read as uint8 (or the reverse): every value off by 128."""
    return packed ^ 0x80


def rewrite_blobs(path: Path, blobs: list[bytes], change: Callable[[np.ndarray], np.ndarray]) -> int:
    """Each of ``blobs`` (a weight tensor's bytes as the file stores them, found exactly once) changed
    in place in ``path``; how many."""
    data = bytearray(path.read_bytes())
    for blob in blobs:
        at = data.find(blob)
        assert at >= 0 and data.find(blob, at + 1) < 0, f"{path}: a weight's {len(blob)} bytes not found once"
        data[at:at + len(blob)] = change(np.frombuffer(blob, np.uint8)).astype(np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return len(blobs)


def genai_int4_weights(folder: Path) -> list[bytes]:
    """The packed 4-bit weights of the builder's MatMulNBits (input B), from its external data."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(folder / "model.onnx"))
    initializers = {i.name: i for i in model.graph.initializer}
    return [numpy_helper.to_array(initializers[n.input[1]]).tobytes() for n in model.graph.node
            if n.op_type == "MatMulNBits"]


def pte_int4_weights(folder: Path) -> list[bytes]:
    """The 8da4w export's packed 4-bit weights: the XNNPACK delegate's named data entries that have a
    ``scale_`` entry right after them (the float ``ffn_down``, 176 wide, has none)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    named = deserialize_pte_binary((folder / "model.pte").read_bytes()).named_data
    scaled = {entry.buffer_index - 1 for key, entry in named.pte_data.items() if key.startswith("scale_")}
    return [bytes(named.buffers[i]) for i in sorted(scaled)]


def tflite_int8_weights(folder: Path) -> list[bytes]:
    """The dynamic_int8 export's int8 weight matrices, as the interpreter reads them."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(folder / "model.tflite"), experimental_preserve_all_tensors=True)
    found = [interpreter.get_tensor(d["index"]).tobytes() for d in interpreter.get_tensor_details()
             if d["dtype"] == np.int8 and int(np.prod(d["shape"])) >= 1024]
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class QuantizedExport:
    folder: str  # under fixtures/llm
    reference: str  # the float export of the same weights, by the same tool
    backend: str
    module: str  # what the runtime needs
    budgets: dict
    weights: Callable[[Path], list[bytes]]
    file: str  # the file that holds them
    broken: Callable[[np.ndarray], np.ndarray]


# Measured on these files (docs/llm.md's table): int4 top-1 0.8125, mean KLD 2.2e-4; 8da4w 1.0,
# 2.2e-4; dynamic_int8 1.0, 2.6e-6; each wrongly quantized one top-1 0.0, mean KLD 0.026-0.033.
FOUR_BIT = {"min_top1_agreement": 0.75, "max_kld": 1e-3}
EIGHT_BIT = {"min_top1_agreement": 0.95, "max_kld": 1e-5}
EXPORTS = [
    QuantizedExport("genai_llama_int4", "genai_llama", "onnxruntime-genai", "onnxruntime_genai", FOUR_BIT,
                    genai_int4_weights, "model.onnx.data", swap_nibbles),
    QuantizedExport("et_llama_8da4w", "et_llama", "executorch", "executorch", FOUR_BIT,
                    pte_int4_weights, "model.pte", swap_nibbles),
    QuantizedExport("litert_llama_int8", "litert_llama", "litert", "ai_edge_litert", EIGHT_BIT,
                    tflite_int8_weights, "model.tflite", flip_sign_bit),
]


def _test(export: QuantizedExport, prompts: list[list[int]]) -> str:
    budgets = ", ".join(f"{k}={v!r}" for k, v in export.budgets.items())
    return f"""
@pytest.mark.edge_llm(model="models/{export.folder}", reference="models/{export.reference}", prompts={prompts!r},
                      new_tokens=8, backends=[{export.backend!r}], min_token_agreement=0, logits_atol=None, {budgets})
def test_{export.folder}(edge_llm):
    pass
"""


@pytest.mark.filterwarnings("ignore:Warning. Enabling .experimental_preserve_all_tensors.")
def test_the_quantized_exports_pass_their_budgets_and_wrongly_quantized_ones_fail(pytester: pytest.Pytester) -> None:
    """One project holding each quantized export beside its float one: goldens recorded from the
    float exports (reference=), each quantized export passes; then its weights wrongly packed (the
    same file, the same runtime) fail both budgets, named."""
    exports = [e for e in EXPORTS if importlib.util.find_spec(e.module)]
    if not exports:
        pytest.skip("none of onnxruntime-genai, executorch, ai-edge-litert is installed")
    prompts = json.loads((LLM / "genai_llama" / "pytorch_greedy.json").read_text())["prompts"]
    for export in exports:
        for folder in (export.folder, export.reference):
            if not (pytester.path / "models" / folder).exists():
                shutil.copytree(LLM / folder, pytester.path / "models" / folder)
    pytester.makepyfile(test_quantized="import pytest\n" + "".join(_test(e, prompts) for e in exports))
    pytester.runpytest_inprocess("--edge-update-golden").assert_outcomes(passed=len(exports))
    golden = pytester.path / "golden" / "models"
    assert sorted(p.name for p in golden.iterdir()) == sorted(e.reference for e in exports)  # float goldens only

    def figures() -> tuple[pytest.RunResult, dict]:
        result = pytester.runpytest_inprocess("--edge-report=r.json")
        records = json.loads((pytester.path / "r.json").read_text())["records"]
        return result, {r["test"].split("::")[-1].split("[")[0][len("test_"):]: r["llm"]["teacher_forced"]
                        for r in records}

    result, good = figures()
    result.assert_outcomes(passed=len(exports))
    for export in exports:
        found = good[export.folder]
        assert found["positions"] == 16 and found["top1_agreement"] >= export.budgets["min_top1_agreement"]
        assert 0 < found["kld"]["mean"] <= export.budgets["max_kld"], (export.folder, found)
        where = pytester.path / "models" / export.folder
        assert rewrite_blobs(where / export.file, export.weights(where), export.broken) >= 7
    result, broken = figures()
    result.assert_outcomes(failed=len(exports))
    for export in exports:
        assert broken[export.folder]["top1_agreement"] < 0.5 and broken[export.folder]["kld"]["mean"] > 0.01
        result.stdout.fnmatch_lines([
            f"*{export.backend}: teacher-forced top-1 agreement * over 16 positions * is under the budget "
            f"min_top1_agreement={export.budgets['min_top1_agreement']}*",
            f"*{export.backend}: teacher-forced mean KL divergence * exceeds the budget "
            f"max_kld={export.budgets['max_kld']}*"], consecutive=False)


def test_the_quantized_fixtures_hold_the_float_fixtures_weights() -> None:
    """Made from the same network: PyTorch's greedy tokens in each quantized fixture equal its float
    one's, and its weights' digest the Llama's (litert_llama's file records it; genai_llama's and
    et_llama's predate the digest)."""
    llama = json.loads((LLM / "litert_llama" / "pytorch_greedy.json").read_text())["weights_sha256"]
    for export in EXPORTS:
        quantized, float_ = (json.loads((LLM / f / "pytorch_greedy.json").read_text())
                             for f in (export.folder, export.reference))
        assert quantized["tokens"][:2] == float_["tokens"][:2], export.folder
        assert quantized["weights_sha256"] == llama, export.folder
