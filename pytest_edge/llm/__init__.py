"""On-device LLM checks: ``@pytest.mark.edge_llm`` and the ``edge_llm`` fixture.

A decoder is a capability of the one Backend interface (``Backend.open_decoder``, each runtime's
export convention in its own module under ``backends/``), run in the backend's worker like every
model. Here only what is LLM-specific: prompt checks (:mod:`.prompts`), goldens of token ids and first-step
logits (:mod:`.golden`), the pure figures and verdicts (:mod:`.metrics`), TTFT/TPOT in the backend's
fresh workers and the context sweep (:mod:`.probe`), the check tying them together
(:mod:`.checks`) and the pytest hooks (:mod:`.plugin`).
"""
