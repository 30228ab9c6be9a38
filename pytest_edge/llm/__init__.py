"""What is a decoder LLM's alone: the ``@pytest.mark.edge_llm`` marker's spec and prompt checks
(:mod:`.marker`) and the pure figures and verdicts of generation (:mod:`.metrics`).

A decoder is a capability of the one Backend interface (``Backend.decoders``, each runtime's
export convention in its own module under ``backends/``), run in the backend's worker like every
model, and an edge_llm test takes the path of every edge test: the plugin's hooks, its plan
(``run/decoder_plan.py``), the session's check (its steps in ``run/decoder_check.py``), the one
golden store (``golden/tokens.py``), measurement and gate (``judging/generation.py``) and record
(``Record.generation``).
"""
