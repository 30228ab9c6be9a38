"""ExecuTorch's ScalarType codes (c10::ScalarType, as MethodMeta and ETDump report them) as NumPy
dtype names: the ones a model signature may use, and the wider unsigned ones intermediates may have."""

SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16",
                6: "float32", 7: "float64", 11: "bool"}
INTERMEDIATE_TYPES = {**SCALAR_TYPES, 27: "uint16", 28: "uint32", 29: "uint64"}
