"""Delegate coverage of an ExecuTorch ``.pte`` read from the file alone, with no export-time objects.

The execution plan lists instructions: a ``KernelCall`` runs a portable/optimized CPU kernel (a
fallback), a ``DelegateCall`` hands a partition to a backend; moves and jumps are not
operators. XNNPACK payloads are flatbuffers with
a schema published in the executorch package, so the nodes inside are counted; a payload this
module cannot read counts as one delegated operator and marks the figure approximate.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from functools import lru_cache
from pathlib import Path

from ..base import Coverage
from .program import delegate_payload, forward_plan, read_plans

_XNN_MAGIC = b"XH00"


@lru_cache(maxsize=1)
def xnnpack_node_names() -> list[str]:
    """The ``XNodeUnion`` member names, in union order, from the schema the executorch package ships
    (found by path: importing ``executorch.backends.xnnpack`` imports the exporter, ~4 s)."""
    import importlib.util

    spec = importlib.util.find_spec("executorch")
    folders = list(spec.submodule_search_locations or []) if spec else []
    schema_file = next((Path(f) / "backends/xnnpack/serialization/schema.fbs" for f in folders
                        if (Path(f) / "backends/xnnpack/serialization/schema.fbs").is_file()), None)
    if schema_file is None:
        raise ValueError("the executorch package has no XNNPACK schema (backends/xnnpack/serialization/schema.fbs)")
    schema = schema_file.read_text()
    body = re.search(r"union\s+XNodeUnion\s*\{(.*?)\}", schema, re.S)
    if body is None:
        raise ValueError("XNodeUnion not found in the XNNPACK schema")
    lines = [line.split("//")[0].strip() for line in body.group(1).splitlines()]
    return [line.split(":")[0].rstrip(",").strip() for line in lines if line]


def xnnpack_nodes(payload: bytes) -> list[str]:
    """Names of the XNNPACK nodes in one delegate payload (``XNNGraph.xnodes``)."""
    from flatbuffers import encode, number_types, table

    if payload[4:8] == _XNN_MAGIC:
        fb_offset, fb_size = struct.unpack_from("<II", payload, 10)
        buf = bytearray(payload[fb_offset:fb_offset + fb_size])
    else:
        buf = bytearray(payload)
    graph = table.Table(buf, encode.Get(number_types.UOffsetTFlags.packer_type, buf, 0))
    field = graph.Offset(6)  # XNNGraph slot 1: xnodes:[XNode]
    if not field:
        return []
    names = xnnpack_node_names()
    start, count = graph.Vector(field), graph.VectorLen(field)
    found = []
    for i in range(count):
        node = table.Table(buf, graph.Indirect(start + i * 4))
        type_slot = node.Offset(4)  # XNode slot 0: xnode_union_type (ubyte)
        kind = node.Get(number_types.Uint8Flags, node.Pos + type_slot) if type_slot else 0
        found.append(names[kind - 1] if 0 < kind <= len(names) else f"XNNNode#{kind}")
    return found


def _backend_name(delegate_id: str) -> str:
    return delegate_id.removesuffix("Backend").upper() if delegate_id.endswith("Backend") else delegate_id


def pte_coverage(data: bytes) -> Coverage:
    """Coverage of the program's "forward" method (the one pytest-edge runs), read by
    :mod:`.program`'s flatbuffer reader; one of its ``UNREADABLE`` errors for a broken file."""
    plan = forward_plan(read_plans(data))
    if plan is None:
        raise ValueError("the program has no execution plan")
    # Every kernel call counts, so the counts equal the export-time get_delegation_info (getitem
    # never reaches the runtime; a non-delegated view_copy runs as et_view).
    fallback = Counter(operator for operator, _ in plan.kernel_calls)
    delegated = 0
    approximate = False
    delegate_names: list[str] = []
    for index in plan.delegate_calls:
        if not 0 <= index < len(plan.delegates):
            raise ValueError(f"a delegate call to delegate {index} of {len(plan.delegates)}")
        delegate_id = plan.delegates[index]
        backend = _backend_name(delegate_id)
        if backend not in delegate_names:
            delegate_names.append(backend)
        try:
            nodes = (xnnpack_nodes(delegate_payload(data, plan.delegate_data[index]))
                     if delegate_id == "XnnpackBackend" else None)
        except (ValueError, IndexError, struct.error):
            nodes = None
        if nodes is None:
            delegated += 1
            approximate = True
        else:
            delegated += len(nodes)
    total = delegated + sum(fallback.values())
    return Coverage(
        total_ops=total, delegated_ops=delegated, fallback_ops=sum(fallback.values()),
        partitions=len(plan.delegate_calls), fallback_op_names=dict(fallback), delegates=delegate_names,
        method="runtime", approximate=approximate)
