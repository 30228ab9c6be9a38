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

_XNN_MAGIC = b"XH00"


@lru_cache(maxsize=1)
def xnnpack_node_names() -> list[str]:
    """The ``XNodeUnion`` member names, in union order, from the schema the executorch package ships."""
    import executorch.backends.xnnpack.serialization as xnn_serialization

    folder = Path(next(iter(xnn_serialization.__path__)))  # a namespace package: no __file__
    schema = (folder / "schema.fbs").read_text()
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
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(data).program
    plan = program.execution_plan[0]  # "forward", the method pytest-edge runs
    fallback: Counter[str] = Counter()
    delegated = partitions = 0
    approximate = False
    delegate_names: list[str] = []
    for instruction in plan.chains[0].instructions:
        args = instruction.instr_args
        kind = type(args).__name__
        if kind == "KernelCall":
            # Every kernel call counts, so the counts equal the export-time get_delegation_info
            # (getitem never reaches the runtime; a non-delegated view_copy runs as et_view).
            fallback[plan.operators[args.op_index].name] += 1
        elif kind == "DelegateCall":
            partitions += 1
            delegate = plan.delegates[args.delegate_index]
            backend = _backend_name(delegate.id)
            if backend not in delegate_names:
                delegate_names.append(backend)
            payload = program.backend_delegate_data[delegate.processed.index].data
            try:
                nodes = xnnpack_nodes(payload) if delegate.id == "XnnpackBackend" else None
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
        partitions=partitions, fallback_op_names=dict(fallback), delegates=delegate_names,
        method="runtime", approximate=approximate)
