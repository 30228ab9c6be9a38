"""Input shapes and tensor names across one network's formats: which shape each input of a load
gets (the marker's, the golden's, what a converter wrote beside the artifact) and how the golden's
tensor names map to an artifact's (by name, else by position)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

Shape = tuple[int, ...]


def matched_positions(reference: Sequence[str], actual: Sequence[str]) -> list[int]:
    """For each reference tensor name, its position in ``actual``. Artifacts of one network keep the
    order of the network's arguments but not always the names (pnnx's ``in0`` for ONNX's ``x``,
    LiteRT's ``serving_default_x:0``, a .pte's positions), so tensors are matched by name when both
    sides name the same set, and by position otherwise. ValueError when the counts differ."""
    if len(reference) != len(actual):
        raise ValueError(f"{len(actual)} tensors ({list(actual)}) where the golden signature has "
                         f"{len(reference)} ({list(reference)})")
    if set(reference) == set(actual):
        return [list(actual).index(n) for n in reference]
    return list(range(len(reference)))


def renaming(golden_names: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    """Golden name -> this artifact's name, for the names that differ (matched as
    :func:`matched_positions` matches them); {} without a golden or where the counts differ."""
    try:
        order = matched_positions(golden_names, names) if golden_names else []
    except ValueError:
        return {}
    return {golden_names[i]: names[j] for i, j in enumerate(order) if golden_names[i] != names[j]}


@dataclass(frozen=True)
class InputShapes:
    """The input shapes a load asks for, by the golden's names: the marker's ``shapes=``
    (``requested``), the golden's own inputs (name and concrete shape, in order; empty when no golden
    is known yet) and what a converter wrote beside the artifact (``beside``, by position, with the
    file it came from); a Load carries ``codec.to_json(shapes)``. A backend takes them by its own input names (:meth:`for_inputs`); one whose
    format may not carry shapes (an ncnn ``.param``) fills the gaps in that order (:meth:`resolve`)."""

    requested: dict[str, Shape] = field(default_factory=dict)
    golden: tuple[tuple[str, Shape], ...] = ()
    beside: tuple[Shape, ...] = ()
    beside_source: str = ""

    def renaming(self, names: Sequence[str]) -> dict[str, str]:
        return renaming([n for n, _ in self.golden], names)

    def for_inputs(self, names: Sequence[str]) -> dict[str, Shape]:
        """``shapes=`` by this artifact's input names (a name neither side has is kept as given:
        the session reports it)."""
        renamed = self.renaming(names)
        return {renamed.get(name, name): shape for name, shape in self.requested.items()}

    def resolve(self, names: Sequence[str], declared: Sequence[Shape | None]) -> tuple[list[Shape | None], dict[str, str]]:
        """Each input's shape and where it came from: ``shapes=`` of the marker, else the artifact's
        own (``declared``), else the golden's input at that position, else the converter's file."""
        requested = self.for_inputs(names)
        golden = dict(zip(names, [s for _, s in self.golden])) if len(self.golden) == len(names) else {}
        beside = dict(zip(names, self.beside)) if len(self.beside) == len(names) else {}
        shapes: list[Shape | None] = []
        sources: dict[str, str] = {}
        for name, own in zip(names, declared):
            for source, shape in (("marker shapes=", requested.get(name)), ("the artifact", own),
                                  ("the golden", golden.get(name)), (self.beside_source, beside.get(name))):
                if shape is not None:
                    shapes.append(tuple(shape))
                    sources[name] = source
                    break
            else:
                shapes.append(None)
        return shapes, sources

    @classmethod
    def of(cls, shapes: "InputShapes | Mapping[str, Sequence[int]] | None") -> "InputShapes":
        """``Backend.load(shapes=...)`` as a caller outside a session gives it too: a plain
        ``{name: shape}`` (or nothing) is the request alone."""
        if isinstance(shapes, InputShapes):
            return shapes
        return cls(requested={str(k): tuple(int(d) for d in v) for k, v in (shapes or {}).items()})


# The largest input pytest-edge allocates (2**28 elements: 1 GiB of float32, a 3 x 9459 x 9459 image):
# a shape a hostile or mistaken file declares (20000 x 20000 x 3) is refused before any allocation.
MAX_INPUT_ELEMENTS = 2**28


def oversized_input(shape: Sequence[int]) -> str | None:
    """Why an input of ``shape`` is not allocated, or None."""
    elements = 1
    for dim in shape:
        elements *= max(int(dim), 0)
    if elements > MAX_INPUT_ELEMENTS:
        return (f"shape {list(shape)} is {elements:,} elements, more than the {MAX_INPUT_ELEMENTS:,} "
                "pytest-edge allocates for one input")
    return None


# What Backend.load takes: a session's InputShapes, or a caller's plain {name: shape}.
LoadShapes = InputShapes | Mapping[str, Sequence[int]]
