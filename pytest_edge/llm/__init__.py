"""On-device LLM checks: ``@pytest.mark.edge_llm`` and the ``edge_llm`` fixture.

Greedy generation per backend in the runtime's own LLM convention (:mod:`.runners`), goldens of
token ids and first-step logits (:mod:`.golden`), the pure figures and verdicts (:mod:`.metrics`),
timing and memory in fresh processes (:mod:`.probe`, :mod:`.measure`), the check tying them
together (:mod:`.checks`) and the pytest hooks (:mod:`.plugin`).
"""
