"""LiteRT-LM: a ``.litertlm`` run by its own Engine and Session, as apps run it (decoders only)."""
