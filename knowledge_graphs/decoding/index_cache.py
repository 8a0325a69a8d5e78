"""The compiled KG-constraint indices on disk, so a warm start skips most of the compile (seconds per domain).

A cache file is keyed by everything the compiled index depends on: the KG's content version, the constrained
types, the tokenizer (a hash of its JSON), the vocabulary size and the code that builds the index (a hash of
its source files). Any change picks another key and the index is rebuilt. Reading, writing and what a damaged
file does are `knowledge_graphs.disk_cache`'s: it is ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
from collections.abc import Callable, Collection
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from knowledge_graphs import disk_cache
from knowledge_graphs.decoding import (
    constraint_masks,
    guard_records,
    memo,
    surface_guard,
    trie,
    vocab_guard,
    vocab_text,
)
from knowledge_graphs.model import KgOutline, KnowledgeGraph

_FORMAT = b"kgidx1\n"


@cache
def code_version() -> str:
    """A hash of the source of every module whose code shapes the compiled index."""
    modules = (constraint_masks, guard_records, memo, surface_guard, trie, vocab_guard, vocab_text)
    return disk_cache.files_version(Path(module.__file__ or "") for module in modules)


def cache_key(kg: KnowledgeGraph | KgOutline, types: Collection[str], tokenizer: Tokenizer, vocab_size: int) -> str:
    parts = [kg.version, sorted(types), hashlib.sha256(tokenizer.to_str().encode()).hexdigest(), vocab_size,
             code_version(), list(sys.version_info[:2]), np.__version__, pickle.HIGHEST_PROTOCOL]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def load_or_compile(cache_dir: Path | None, domain: str, key: str,
                    compile_index: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The compiled index from `cache_dir` when a whole, matching file is there, else compiled and saved."""
    path = Path(cache_dir) / f"{domain}-{key[:32]}.kgidx" if cache_dir is not None else None
    return disk_cache.load_or_build(path, _FORMAT, compile_index, accept=_is_index, stale=f"{domain}-*.kgidx")


def _is_index(found: Any) -> bool:
    return isinstance(found, dict) and set(found) == set(constraint_masks.COMPILED_PARTS)
