"""The documented import path of the quantization table (``from pytest_edge.quant import
compare_models``): the same module as :mod:`pytest_edge.triage.quant`."""

import sys

from .triage import quant

sys.modules[__name__] = quant
