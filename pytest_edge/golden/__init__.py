"""Golden outputs: the store, the validation of untrusted golden files, the golden sets of a session, which sets the tests use, and the obtained files of a mismatch."""
