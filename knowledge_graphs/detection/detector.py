"""Domain detection: which of the three domains (if any) a prompt and its answer belong to.

A text is split into sentences; each sentence is embedded once with the bundled MiniLM and linked once
against the three KGs. The classifier scores the mean sentence embedding plus the KG evidence counts, one
probability per domain; every domain at or above the threshold is detected (a text may belong to two).

A single sentence can also detect its domain on its own, when it names an entity of that domain's KG
(rare-word evidence) and the classifier scores the sentence alone at or above the threshold: otherwise a
few sentences of padding ("Give me a soup recipe. Chop the onions. ...") dilute the mean until a wrong
dose in one sentence goes unverified. `DetectionState` does this incrementally, so a streamed answer
pays for each sentence once.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowledge_graphs.detection.classifier import DomainClassifier, kg_feature_vector, load_classifier
from knowledge_graphs.detection.coalescing import CoalescingEncoder
from knowledge_graphs.detection.embedding_cache import EmbeddingCache
from knowledge_graphs.detection.evidence import KgEvidence, KgHit, feature_counts
from knowledge_graphs.model import KnowledgeGraph

# Chosen on the training texts' grouped 5-fold cross-validation (off-domain share sent to a validator
# 0.04 at 0.6 against 0.06 at 0.5, in-domain accuracy unchanged); see docs/domain-detection.md.
DEFAULT_THRESHOLD = 0.6
DEFAULT_EMBEDDING_CACHE = 1024   # sentence vectors kept (about 1.6 MB): see detection/embedding_cache.py
MAX_SENTENCE_CHARS = 1000     # MiniLM reads 256 word pieces; longer "sentences" are cut into pieces
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z*#-])|\n+")
# A period after one of these ends no sentence: "Miranda v. Arizona", "384 U.S. 436", "Dr. Smith", "No. 5".
_ABBREVIATION = re.compile(r"(?:^|\s)(?:[A-Za-z]{1,3}|(?:[A-Za-z]{1,2}\.)+[A-Za-z]{0,2})\.$")


def _sentences(text: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        if match.group().startswith("\n") or not _ABBREVIATION.search(text[start:match.start()]):
            pieces.append(text[start:match.start()])
            start = match.end()
    return [*pieces, text[start:]]


def split_for_detection(text: str) -> list[str]:
    """Sentences and lines of `text` (a coarse split: detection needs units of meaning, not exact spans; a
    citation must stay in one piece so its evidence is seen)."""
    pieces = []
    for part in _sentences(text):
        part = part.strip()
        while part:
            pieces.append(part[:MAX_SENTENCE_CHARS])
            part = part[MAX_SENTENCE_CHARS:].strip()
    return pieces


@dataclass(frozen=True, slots=True)
class Detection:
    scores: dict[str, float]                 # every domain's probability
    domains: tuple[str, ...]                 # those at or above the threshold, best first
    threshold: float
    evidence: dict[str, list[str]]           # domain -> KG entity ids that counted as evidence
    classifier_version: str
    sentences: int
    # domains detected by one sentence alone (entity evidence + its own score), with that sentence's score
    sentence_triggers: dict[str, float] = field(default_factory=dict)
    embedding_dtype: str | None = None       # MiniLM's precision for these vectors (None: no sentence embedded)

    @property
    def top(self) -> str | None:
        return self.domains[0] if self.domains else None

    def to_dict(self) -> dict[str, Any]:
        return {"domains": list(self.domains), "scores": {d: round(s, 4) for d, s in self.scores.items()},
                "threshold": self.threshold, "kg_evidence": self.evidence,
                "sentence_triggers": {d: round(s, 4) for d, s in self.sentence_triggers.items()},
                "classifier": self.classifier_version, "sentences": self.sentences,
                "embedding_dtype": self.embedding_dtype}


@dataclass(slots=True)
class DetectionState:
    """Running detection over a prompt and the answer so far: add output pieces as they are produced."""

    detector: DomainDetector
    embedding_sum: np.ndarray
    sentences: int = 0
    hits: dict[tuple[str, str], KgHit] = field(default_factory=dict)
    triggers: dict[str, float] = field(default_factory=dict)

    def add(self, text: str) -> Detection:
        pieces = split_for_detection(text)
        if pieces:
            vectors = self.detector.embed(pieces)                   # [n, dim], unit rows
            self.embedding_sum += vectors.sum(axis=0)
            self.sentences += len(pieces)
            for piece, vector in zip(pieces, vectors, strict=True):
                piece_hits = self.detector.evidence.hits(piece)
                for hit in piece_hits:
                    self.hits.setdefault((hit.domain, hit.entity_id), hit)
                for domain, score in self.detector.sentence_triggers(vector, piece_hits).items():
                    self.triggers[domain] = max(score, self.triggers.get(domain, 0.0))
        return self.result()

    def result(self) -> Detection:
        return self.detector.decide(self.embedding_sum, self.sentences, list(self.hits.values()), self.triggers)


class DomainDetector:
    """Build once per process (it holds the KG linkers and the classifier); thread-safe for reading."""

    def __init__(self, kgs: Mapping[str, KnowledgeGraph], *, threshold: float = DEFAULT_THRESHOLD,
                 classifier: DomainClassifier | None = None, embedding_cache: int = DEFAULT_EMBEDDING_CACHE,
                 embedding_dtype: str = "auto") -> None:
        """`embedding_dtype`: MiniLM's precision (`knowledge_graphs.minilm.DTYPES`; auto: bf16 where the CPU
        computes it natively)."""
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"detection threshold must be in (0, 1], got {threshold}")
        self.classifier = classifier or load_classifier()
        self.domains = tuple(d for d in self.classifier.domains if d in kgs)
        self.evidence = KgEvidence({d: kgs[d] for d in self.domains})
        self.threshold = threshold
        self._dim = int(self.classifier.weights.shape[1]) - len(kg_feature_vector({}))
        self.embeddings = EmbeddingCache(embedding_cache)
        self.embedding_dtype = embedding_dtype
        # concurrent requests' sentences share forwards
        self.encoder = CoalescingEncoder(functools.partial(_encode_with_minilm, dtype=embedding_dtype))

    @property
    def version(self) -> str:
        return self.classifier.version

    def embed(self, pieces: list[str]) -> np.ndarray:
        return self.embeddings.vectors(pieces, self.encoder)    # [n, dim], unit length

    def start(self, prompt: str | None = None) -> DetectionState:
        state = DetectionState(self, np.zeros(self._dim, dtype=np.float32))
        if prompt:
            state.add(prompt)
        return state

    def detect(self, prompt: str | None, output: str | None) -> Detection:
        state = self.start(prompt)
        if output:
            state.add(output)
        return state.result()

    def sentence_triggers(self, vector: np.ndarray, hits: list[KgHit]) -> dict[str, float]:
        """Domains one sentence detects on its own: it names an entity of the domain's KG, and the classifier
        scores the sentence alone at or above the threshold."""
        named = {hit.domain for hit in hits}
        if not named:
            return {}
        scores = self.classifier.scores(vector, kg_feature_vector(feature_counts(hits)))
        return {d: scores[d] for d in named if d in self.domains and scores[d] >= self.threshold}

    def decide(self, embedding_sum: np.ndarray, sentences: int, hits: list[KgHit],
               triggers: dict[str, float] | None = None) -> Detection:
        triggers = triggers or {}
        if sentences == 0:
            scores = dict.fromkeys(self.domains, 0.0)
        else:
            mean = embedding_sum / max(float(np.linalg.norm(embedding_sum)), 1e-9)
            all_scores = self.classifier.scores(mean, kg_feature_vector(feature_counts(hits)))
            scores = {d: all_scores[d] for d in self.domains}
        above = [d for d, s in scores.items() if s >= self.threshold or d in triggers]
        above.sort(key=lambda d: (-(scores[d] >= self.threshold), -scores[d]))   # the text's own domains first
        evidence = {d: sorted(h.entity_id for h in hits if h.domain == d) for d in self.domains}
        return Detection(scores, tuple(above), self.threshold, {d: ids for d, ids in evidence.items() if ids},
                         self.classifier.version, sentences, dict(triggers),
                         _loaded_dtype(self.embedding_dtype) if sentences else None)


def _loaded_dtype(dtype: str) -> str:
    from knowledge_graphs.minilm import load_encoder  # noqa: PLC0415 - loaded already: sentences were embedded

    return load_encoder(dtype).dtype


def _encode_with_minilm(texts: list[str], *, dtype: str) -> np.ndarray:
    from knowledge_graphs.minilm import load_encoder  # no torch: see knowledge_graphs.minilm

    return load_encoder(dtype).encode(texts)
