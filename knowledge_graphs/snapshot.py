"""Built KGs on disk between starts, and the indices derived from them (entity linkers, mention automata).

Building the medical KG reads two packages' data and the curated files and indexes ~70k entities; its
linkers and mention automata normalise ~270k surface forms each (seconds apiece, on the path to `/ready`).
Reading them back is a fraction of that (`knowledge_graphs.disk_cache` holds the file format).

A KG snapshot is keyed by what the KG is built from, so that any change to its content is a new key:
- every file under the curated data folder, by content;
- the code that builds KGs: every module of this package;
- the environment: the interpreter and every installed distribution with its version (the package-derived
  entities come from their data, and the pickle from their classes).
A derived index is keyed by its KG's snapshot key, its name and the code that builds it. The KG is not stored
with it, only referred to, and the KG loaded beside it is put back on load. A KG that did not come from
`load_kg` (built in a test, passed by a caller) has no such key (its `version` hashes names and facts, not
every attribute), so its indices are built, never read from disk.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import TypeVar
from weakref import WeakKeyDictionary

from knowledge_graphs import disk_cache
from knowledge_graphs.curated import DATA_DIR
from knowledge_graphs.model import KgOutline, KnowledgeGraph

T = TypeVar("T")

_FORMAT = b"kgsnap1\n"
_PACKAGE = Path(__file__).parent
# KG -> (its snapshot key, the folder it came from), for the indices derived from it
_snapshots: WeakKeyDictionary[KnowledgeGraph, tuple[str, Path]] = WeakKeyDictionary()


@cache
def kg_key(domain: str, data_dir: Path = DATA_DIR) -> str:
    """The snapshot key of `domain`'s KG built from `data_dir` by this code in this environment."""
    parts = [domain, str(data_dir.resolve()), disk_cache.files_version([_PACKAGE], "*.py"),
             disk_cache.files_version([data_dir]), disk_cache.environment_version()]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def load_kg(domain: str, directory: Path, build: Callable[[], KnowledgeGraph], data_dir: Path = DATA_DIR,
            ) -> KnowledgeGraph:
    """`domain`'s KG from its snapshot in `directory`, or `build()` and kept there for the next start (with its
    outline, `load_outline`)."""
    key = kg_key(domain, data_dir)
    path = Path(directory) / f"{domain}-{key[:32]}.kg"
    kg = disk_cache.load_or_build(path, _FORMAT, build, stale=f"{domain}-*.kg",
                                  accept=lambda found: isinstance(found, KnowledgeGraph) and found.domain == domain)
    _snapshots[kg] = (key, Path(directory))
    outline = _outline_path(domain, directory, key)
    if not outline.exists():
        disk_cache.write(outline, KgOutline.of(kg), _FORMAT, stale=f"{domain}-*.kgoutline")
    return kg


def load_outline(domain: str, directory: Path, data_dir: Path = DATA_DIR) -> KgOutline | None:
    """The outline of the KG `load_kg` would read from `directory` (a few ms, where the medical KG takes ~0.3 s),
    or None when there is none yet, or it is damaged, or the KG's key has changed since it was written."""
    path = _outline_path(domain, directory, kg_key(domain, data_dir))
    found = disk_cache.read(path, _FORMAT, accept=lambda found: isinstance(found, KgOutline) and found.domain == domain)
    if found is None:
        path.unlink(missing_ok=True)   # a damaged one goes, so the next `load_kg` writes it again
    return found


def _outline_path(domain: str, directory: Path, key: str) -> Path:
    return Path(directory) / f"{domain}-{key[:32]}.kgoutline"


def derived(kg: KnowledgeGraph, name: str, build: Callable[[], T], *, kind: type[T], code: Iterable[Path] = ()) -> T:
    """What `build()` derives from `kg` (it may hold a reference to `kg`), read from disk when `kg` came from a
    snapshot and this (name, code) was built for it before. name: one per kind and parameters of index, without
    "-" (a new file replaces the older ones of its name); code: files or folders whose source shapes it beyond this package (which the KG's key covers)."""
    known = _snapshots.get(kg)
    if known is None:
        return build()
    kg_snapshot_key, directory = known
    key = hashlib.sha256(json.dumps([kg_snapshot_key, name, disk_cache.files_version(code, "*.py")]).encode())
    path = directory / f"{kg.domain}-{name}-{key.hexdigest()[:32]}.kgsnap"
    return disk_cache.load_or_build(path, _FORMAT, build, accept=lambda found: isinstance(found, kind),
                                    references={"kg": kg}, stale=f"{kg.domain}-{name}-*.kgsnap")
