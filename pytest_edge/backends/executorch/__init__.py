"""ExecuTorch: .pte programs, their delegate coverage, ETDump intermediates, its LLM export."""
