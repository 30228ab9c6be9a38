"""accuracy."""

DEFAULT_SEED = 0  # inputs drawn from a signature; here, not in .inputs, so settings need no NumPy
