"""LiteRT-LM as apps run it (the ``litert-lm`` backend): the fixtures' Llama (litert-torch's
dynamic_int8 export) packed by ``litert-lm-builder`` with a word-per-id tokenizer
(fixtures/make_litertlm.py), run through LiteRT-LM's own Engine and Session."""

from __future__ import annotations

import json
import shutil

import pytest

from edge_helpers import FIXTURES

pytest.importorskip("litert_lm")
pytest.importorskip("litert_lm_builder")
pytest.importorskip("ai_edge_litert")
LLM = FIXTURES / "llm"


def test_a_litertlm_generates_pytorchs_tokens_through_its_own_session(pytester: pytest.Pytester,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Judged against the golden of the .tflite it packs (recorded on ``litert``, reference=): the
    tokens are PyTorch's for the three prompts (one of 40 tokens); the logits figures are not
    measured, said on the record; measured, LiteRT-LM's own BenchmarkInfo is beside our TTFT/TPOT.
    The engine's XNNPACK cache goes to pytest-edge's cache, never beside the user's model."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(pytester.path / "user-cache"))
    shutil.copytree(LLM / "litert_llama_int8", pytester.path / "models" / "int8")
    shutil.copytree(LLM / "litertlm_llama_int8", pytester.path / "models" / "lm")
    greedy = json.loads((LLM / "litertlm_llama_int8" / "pytorch_greedy.json").read_text())
    pytester.makepyfile(test_lm=f"""
        import pytest

        @pytest.mark.edge_llm(model="models/lm", reference="models/int8", prompts={greedy['prompts']!r},
                              new_tokens={greedy['new_tokens']}, backends=["litert-lm"], logits_atol=None)
        def test_tokens(edge_llm):
            assert [edge_llm.generate(p, {greedy['new_tokens']}) for p in {greedy['prompts']!r}] == {greedy['tokens']!r}

        @pytest.mark.edge_llm(model="models/lm", reference="models/int8", prompts={greedy['prompts'][:1]!r},
                              new_tokens=4, backends=["litert-lm"], logits_atol=None, min_top1_agreement=0.9)
        def test_asks_for_logits(edge_llm):
            pass
    """)
    pytester.runpytest_inprocess("--edge-update-golden", "-k", "test_tokens").assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess("--edge-report=r.json", "--edge-measure", "-o", "edge_processes=1")
    result.assert_outcomes(passed=1, failed=1)
    # A budget on a figure this runtime cannot give fails as not measured, never passes in silence.
    result.stdout.fnmatch_lines(["*teacher-forced top-1 agreement not measured on litert-lm*exposes no logits*min_top1_agreement=0.9*"])
    (record,) = [r for r in json.loads((pytester.path / "r.json").read_text())["records"] if "test_tokens[" in r["test"]]
    block = record["llm"]
    assert record["backend"] == "litert-lm" and record["runtime"]["name"] == "litert-lm-api"
    assert [p["tokens"] for p in block["prompts"]] == greedy["tokens"]
    assert block["config"]["source"].endswith("(its .tflite section's prefill/decode signatures)")
    assert block["prompts"][0]["not_measured"].startswith("LiteRT-LM's Session takes text")
    assert record["accuracy"]["cosine"] is None and block["teacher_forced"]["top1_agreement"] is None
    theirs = block["runtime_timings"]
    # One process x 5 timed generations of the first prompt: LiteRT-LM counts the same tokens.
    assert theirs["source"] == "litert_lm BenchmarkInfo" and theirs["prompt_tokens"] == 5 * len(greedy["prompts"][0])
    assert theirs["eval_tokens"] == 5 * greedy["new_tokens"]
    # Both clocks time the same prefill: the engine's within a factor of ours (ours adds the Python calls).
    # clock bound: a ratio of two clocks over the same work, which a machine's speed moves together,
    # with a factor of 20 each way: how close they read is not asserted (benchmarks/, issue 53).
    assert 0.05 < theirs["ttft_ms"] / 5 / block["ttft_ms"]["p50"] < 5, (theirs, block["ttft_ms"])
    assert sorted(p.name for p in (pytester.path / "models" / "lm").iterdir()) == ["model.litertlm", "pytorch_greedy.json"]
    assert len(list((pytester.path / "user-cache" / "pytest-edge" / "litert-lm").glob("*/*.xnnpack_cache"))) == 1


@pytest.mark.parametrize("damage", ["truncated", "not a litertlm"])
def test_a_damaged_litertlm_is_an_error_naming_the_file_and_the_backend(tmp_path, damage: str) -> None:
    from pytest_edge.backends import get_backend
    from pytest_edge.errors import EdgeUsageError

    data = (LLM / "litertlm_llama_int8" / "model.litertlm").read_bytes()
    bad = tmp_path / "model.litertlm"
    bad.write_bytes(data[:5000] if damage == "truncated" else b"TFL3" + data[:200])
    with pytest.raises(EdgeUsageError) as raised:
        get_backend("litert-lm").decoders.config_of(bad)
    assert str(bad) in str(raised.value) and "(litert-lm)" in str(raised.value)


@pytest.mark.parametrize("end", [2**62, "before its start"])
def test_a_section_offset_outside_the_file_is_refused_before_anything_is_read(tmp_path, end) -> None:
    """The header's section offsets are the file's word: an end offset of 2**62 (a raw MemoryError
    before) or one before the section's start (a raw ValueError) is an error naming the file, the
    backend and the span."""
    import io

    from litert_lm_builder import litertlm_header_schema_py_generated as schema
    from litert_lm_builder import litertlm_peek

    from pytest_edge.backends import get_backend
    from pytest_edge.errors import EdgeUsageError

    source = LLM / "litertlm_llama_int8" / "model.litertlm"
    sections = litertlm_peek.read_litertlm_header(str(source), io.StringIO()).SectionMetadata()
    model = next(sections.Objects(i) for i in range(sections.ObjectsLength())
                 if sections.Objects(i).DataType() == schema.AnySectionDataType.TFLiteModel)
    begin, old_end = model.BeginOffset(), model.EndOffset()
    data = bytearray(source.read_bytes())
    at = data.find(old_end.to_bytes(8, "little"), 0, begin)  # in the header, before any section
    assert at > 0
    new_end = end if isinstance(end, int) else begin // 2
    data[at:at + 8] = new_end.to_bytes(8, "little")
    bad = tmp_path / "model.litertlm"
    bad.write_bytes(bytes(data))
    with pytest.raises(EdgeUsageError) as raised:
        get_backend("litert-lm").decoders.config_of(bad)
    assert str(bad) in str(raised.value) and "(litert-lm)" in str(raised.value)
    assert f"spans bytes {begin}-{new_end}, not inside the {len(data)}-byte file" in str(raised.value)
