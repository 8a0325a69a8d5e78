"""The compiled KG-constraint indices on disk, so a warm start skips most of the compile (seconds per domain).

A cache file is keyed by everything the compiled index depends on: the KG's content version, the constrained
types, the tokenizer (a hash of its JSON), the vocabulary size and the code that builds the index (a hash of
its source files). Any change picks another key and the index is rebuilt. A file that does not read back
whole (truncated, corrupt, from another Python) is ignored and rebuilt; its payload digest is checked before
it is unpickled. The directory is the service's own: whoever can write there can run code as the service.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Collection
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from knowledge_graphs.decoding import (
    constraint_masks,
    guard_records,
    surface_guard,
    trie,
    vocab_guard,
    vocab_text,
)
from knowledge_graphs.model import KnowledgeGraph

logger = logging.getLogger("knowledge_graphs.index_cache")

_DIGEST_BYTES = 32
_FORMAT = b"kgidx1\n"


@cache
def code_version() -> str:
    """A hash of the source of every module whose code shapes the compiled index."""
    digest = hashlib.sha256()
    for module in (constraint_masks, guard_records, surface_guard, trie, vocab_guard, vocab_text):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()


def cache_key(kg: KnowledgeGraph, types: Collection[str], tokenizer: Tokenizer, vocab_size: int) -> str:
    parts = [kg.version, sorted(types), hashlib.sha256(tokenizer.to_str().encode()).hexdigest(), vocab_size,
             code_version(), list(sys.version_info[:2]), np.__version__, pickle.HIGHEST_PROTOCOL]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def load_or_compile(cache_dir: Path | None, domain: str, key: str,
                    compile_index: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The compiled index from `cache_dir` when a whole, matching file is there, else compiled and saved."""
    if cache_dir is None:
        return compile_index()
    path = Path(cache_dir) / f"{domain}-{key[:32]}.kgidx"
    found = _read(path)
    if found is not None:
        return found
    compiled = compile_index()
    _write(path, compiled)
    return compiled


def _read(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("KG index cache %s unreadable (%s): rebuilding", path, exc)
        return None
    header = len(_FORMAT)
    digest, payload = raw[header : header + _DIGEST_BYTES], raw[header + _DIGEST_BYTES :]
    if not raw.startswith(_FORMAT) or hashlib.sha256(payload).digest() != digest:
        logger.warning("KG index cache %s is corrupt or from another format: rebuilding", path)
        return None
    try:
        found = pickle.loads(payload)
    except Exception as exc:  # noqa: BLE001 - whatever is wrong with the file, the fix is a rebuild
        logger.warning("KG index cache %s does not load (%s): rebuilding", path, exc)
        return None
    if not isinstance(found, dict) or set(found) != set(constraint_masks.COMPILED_PARTS):
        logger.warning("KG index cache %s holds something else: rebuilding", path)
        return None
    return found


def _write(path: Path, compiled: dict[str, Any]) -> None:
    """Atomically (a reader sees the old file or the whole new one); older keys of the domain are removed."""
    payload = pickle.dumps(compiled, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(handle, "wb") as out:
            out.write(_FORMAT + hashlib.sha256(payload).digest() + payload)
        os.replace(temporary, path)
        for stale in path.parent.glob(f"{path.name.rsplit('-', 1)[0]}-*.kgidx"):
            if stale != path:
                stale.unlink(missing_ok=True)
    except OSError as exc:   # a read-only or full disk costs the next start time, not this one
        logger.warning("KG index cache %s not written (%s)", path, exc)
