"""A device's artifact cache: artifacts arrive by content (``<sha256><suffix>``, checked on
arrival) and a Load names them there; the worker opens no other path. A model with external data
is given a bundle folder where its files sit under the names the model expects."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from ..core.external_data import location_problem
from ..files import atomic_write

CONTENT_NAME = re.compile(r"[0-9a-f]{64}\.[A-Za-z0-9]{1,16}")


class ArtifactCache:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, name: str) -> Path:
        if not CONTENT_NAME.fullmatch(name):
            raise PermissionError(f"{name!r} is not an artifact name of this device's cache (<sha256><suffix>)")
        return self.folder / name

    def has(self, name: str) -> bool:
        return self.path(name).is_file()

    def put(self, name: str, payload: bytes) -> None:
        target = self.path(name)
        digest = hashlib.sha256(payload).hexdigest()
        if digest != name[:64]:
            raise ValueError(f"artifact {name} arrived with sha256 {digest}")
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, payload)

    def model(self, name: str, external: dict) -> Path:
        """The path a runtime loads ``name`` from: the cached file, or, with external data
        (location -> content name), its bundle."""
        path = self.path(name)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not in this device's artifact cache")
        return self._bundle(path, external) if external else path

    def _bundle(self, model: Path, external: dict) -> Path:
        """A folder of the cache where the model and its external data files sit under the names
        the model expects (links to their content-named copies): the runtime finds them beside it.
        A location whose content is the model's own is the model's name there."""
        digest = hashlib.sha256(json.dumps([model.name, sorted(external.items())]).encode()).hexdigest()
        folder = self.folder / "bundles" / digest[:32]
        files = {model.name: model}  # its content name: no location of a real model is 64 hex digits
        for location, name in external.items():
            problem = location_problem(location)
            if problem:
                raise PermissionError(f"external data location {location!r} {problem}: refused")
            source = self.path(name)
            if not source.is_file():
                raise FileNotFoundError(f"external data {location} ({name}): not in this device's artifact cache")
            files[location] = source
        for relative, source in files.items():
            target = folder / relative
            if target.is_file():
                continue  # same bundle name, same contents
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            try:
                os.link(source, temporary)
            except OSError:  # a cache on a file system without hard links
                shutil.copyfile(source, temporary)
            os.replace(temporary, target)
        # The model under its own name where the Load gives it (a split GGUF's first shard, which
        # names the others; a program whose .ptd is named after it): the runtime opens that one.
        own = sorted(location for location, name in external.items() if name == model.name)
        return folder / own[0] if own else folder / model.name
