"""How a figure is obtained and judged: the measuring policies (fresh processes, counted, a decoder's
generation) and the merge gate (regressions against a baseline, counted mode's gate)."""
