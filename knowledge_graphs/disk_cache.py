"""Pickled artefacts kept on disk between starts (built KGs, their linkers, compiled KG-constraint indices), so a
warm start reads what a cold one built.

A file is named by a key over everything its content depends on, so a change anywhere picks another name and
the artefact is rebuilt. A file holds a format line, the SHA-256 of its payload and the payload; one that does
not read back whole (truncated, flipped bytes, another format, another Python) is ignored and rebuilt: the
digest is checked before anything is unpickled. Writes are atomic (a reader sees the old file or the whole new
one). The directory is the service's own: whoever can write there can run code as the service.
"""

from __future__ import annotations

import gc
import hashlib
import io
import logging
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

logger = logging.getLogger("knowledge_graphs.disk_cache")

_DIGEST_BYTES = 32


@cache
def environment_version() -> str:
    """The interpreter and every installed distribution with its version (the names of the `*.dist-info`
    folders on sys.path: listing them costs well under a millisecond, reading their metadata ~0.2 s). Any
    package installed, removed or upgraded is a new environment, so nothing built from a package's data, or
    pickled by a package's classes, outlives the package version it came from."""
    names: set[str] = set()
    for entry in sys.path:
        try:
            names.update(name for name in os.listdir(entry or ".") if name.endswith((".dist-info", ".egg-info")))
        except OSError:
            continue
    digest = hashlib.sha256(f"{sys.implementation.name} {sys.version} {pickle.HIGHEST_PROTOCOL}".encode())
    for name in sorted(names):
        digest.update(name.encode() + b"\n")
    return digest.hexdigest()


def files_version(roots: Iterable[Path], pattern: str = "*") -> str:
    """A hash of the files under `roots` (files or folders) matching `pattern`: their paths and bytes."""
    digest = hashlib.sha256()
    for root in roots:
        files = sorted(root.rglob(pattern)) if root.is_dir() else [root]
        for path in files:
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(root) if root.is_dir() else Path(path.name)
            digest.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def read(path: Path, magic: bytes, *, accept: Callable[[Any], bool],
         references: Mapping[str, Any] | None = None) -> Any | None:
    """What `write` put at `path`, or None when the file is absent, damaged or holds something `accept`
    refuses. references: objects the file names instead of holding (see `write`)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("cache file %s unreadable (%s): rebuilding", path, exc)
        return None
    header = len(magic)
    # a view, not a copy: the medical KG's files are tens of MB
    digest, payload = raw[header : header + _DIGEST_BYTES], memoryview(raw)[header + _DIGEST_BYTES :]
    if not raw.startswith(magic) or hashlib.sha256(payload).digest() != digest:
        logger.warning("cache file %s is corrupt or from another format: rebuilding", path)
        return None
    try:
        found = _unpickle(payload, references or {})
    except Exception as exc:  # noqa: BLE001 - whatever is wrong with the file, the fix is a rebuild
        logger.warning("cache file %s does not load (%s): rebuilding", path, exc)
        return None
    if not accept(found):
        logger.warning("cache file %s holds something else: rebuilding", path)
        return None
    return found


def write(path: Path, value: Any, magic: bytes, *, references: Mapping[str, Any] | None = None,
          stale: str | None = None) -> None:
    """Atomically. references: name -> object that is pickled as its name only (e.g. the KG a linker points
    to, which `read` is given back). stale: a glob of older files this one replaces, removed once it is in place."""
    try:
        payload = _pickle(value, references or {})
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(handle, "wb") as out:
            out.write(magic + hashlib.sha256(payload).digest() + payload)
        os.replace(temporary, path)
        for old in path.parent.glob(stale) if stale else ():
            if old != path:
                old.unlink(missing_ok=True)
    except OSError as exc:   # a read-only or full disk costs the next start time, not this one
        logger.warning("cache file %s not written (%s)", path, exc)


def load_or_build(path: Path | None, magic: bytes, build: Callable[[], Any], *, accept: Callable[[Any], bool],
                  references: Mapping[str, Any] | None = None, stale: str | None = None) -> Any:
    """The artefact at `path` when a whole, accepted file is there, else built and written (None: build only)."""
    if path is None:
        return build()
    found = read(path, magic, accept=accept, references=references)
    if found is not None:
        return found
    built = build()
    write(path, built, magic, references=references, stale=stale)
    return built


class _Pickler(pickle.Pickler):
    def __init__(self, file: Any, references: Mapping[str, Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._names = {id(value): name for name, value in references.items()}

    def persistent_id(self, obj: Any) -> str | None:
        return self._names.get(id(obj))


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, references: Mapping[str, Any]) -> None:
        super().__init__(file)
        self._references = references

    def persistent_load(self, pid: Any) -> Any:
        if pid not in self._references:
            raise pickle.UnpicklingError(f"the file refers to {pid!r}, which was not given")
        return self._references[pid]


def _pickle(value: Any, references: Mapping[str, Any]) -> bytes:
    if not references:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    buffer = io.BytesIO()
    _Pickler(buffer, references).dump(value)
    return buffer.getvalue()


def _unpickle(payload: bytes | memoryview, references: Mapping[str, Any]) -> Any:
    # Unpickling creates millions of objects: with the cyclic GC on, each generation-0 threshold crossed
    # rescans the growing heap (2-3x the time for the medical KG). Nothing here needs collecting mid-load.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _Unpickler(io.BytesIO(payload), references).load() if references else pickle.loads(payload)
    finally:
        if enabled:
            gc.enable()
