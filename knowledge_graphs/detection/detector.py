"""Domain detection: which of the three domains (if any) a prompt and its answer belong to.

A text is split into sentences; each sentence is embedded once with the bundled MiniLM and linked once
against the three KGs. The classifier scores the mean sentence embedding plus the KG evidence counts, one
probability per domain; every domain at or above the threshold is detected (a text may belong to two).
`DetectionState` does this incrementally, so a streamed answer pays for each sentence once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowledge_graphs.detection.classifier import DomainClassifier, kg_feature_vector, load_classifier
from knowledge_graphs.detection.evidence import KgEvidence, KgHit, feature_counts
from knowledge_graphs.model import KnowledgeGraph

# Chosen on the training texts' grouped 5-fold cross-validation (off-domain share sent to a validator
# 0.04 at 0.6 against 0.06 at 0.5, in-domain accuracy unchanged); see docs/domain-detection.md.
DEFAULT_THRESHOLD = 0.6
MAX_SENTENCE_CHARS = 1000     # MiniLM reads 256 word pieces; longer "sentences" are cut into pieces
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9*#-])|\n+")


def split_for_detection(text: str) -> list[str]:
    """Sentences and lines of `text` (a coarse split: detection needs units of meaning, not exact spans)."""
    pieces = []
    for part in _SENTENCE_END.split(text):
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

    @property
    def top(self) -> str | None:
        return self.domains[0] if self.domains else None

    def to_dict(self) -> dict[str, Any]:
        return {"domains": list(self.domains), "scores": {d: round(s, 4) for d, s in self.scores.items()},
                "threshold": self.threshold, "kg_evidence": self.evidence,
                "classifier": self.classifier_version, "sentences": self.sentences}


@dataclass(slots=True)
class DetectionState:
    """Running detection over a prompt and the answer so far: add output pieces as they are produced."""

    detector: DomainDetector
    embedding_sum: np.ndarray
    sentences: int = 0
    hits: dict[tuple[str, str], KgHit] = field(default_factory=dict)

    def add(self, text: str) -> Detection:
        pieces = split_for_detection(text)
        if pieces:
            vectors = self.detector.embed(pieces)                   # [n, dim], unit rows
            self.embedding_sum += vectors.sum(axis=0)
            self.sentences += len(pieces)
            for hit in self.detector.evidence.hits(text):
                self.hits.setdefault((hit.domain, hit.entity_id), hit)
        return self.result()

    def result(self) -> Detection:
        return self.detector.decide(self.embedding_sum, self.sentences, list(self.hits.values()))


class DomainDetector:
    """Build once per process (it holds the KG linkers and the classifier); thread-safe for reading."""

    def __init__(self, kgs: Mapping[str, KnowledgeGraph], *, threshold: float = DEFAULT_THRESHOLD,
                 classifier: DomainClassifier | None = None) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"detection threshold must be in (0, 1], got {threshold}")
        self.classifier = classifier or load_classifier()
        self.domains = tuple(d for d in self.classifier.domains if d in kgs)
        self.evidence = KgEvidence({d: kgs[d] for d in self.domains})
        self.threshold = threshold
        self._dim = int(self.classifier.weights.shape[1]) - len(kg_feature_vector({}))

    @property
    def version(self) -> str:
        return self.classifier.version

    def embed(self, pieces: list[str]) -> np.ndarray:
        from knowledge_graphs.embedding import load_model

        vectors = load_model().encode(pieces, normalize_embeddings=True, convert_to_numpy=True,
                                      batch_size=32, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)               # [n, dim]

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

    def decide(self, embedding_sum: np.ndarray, sentences: int, hits: list[KgHit]) -> Detection:
        if sentences == 0:
            scores = dict.fromkeys(self.domains, 0.0)
        else:
            mean = embedding_sum / max(float(np.linalg.norm(embedding_sum)), 1e-9)
            all_scores = self.classifier.scores(mean, kg_feature_vector(feature_counts(hits)))
            scores = {d: all_scores[d] for d in self.domains}
        above = sorted((d for d, s in scores.items() if s >= self.threshold), key=lambda d: -scores[d])
        evidence = {d: sorted(h.entity_id for h in hits if h.domain == d) for d in self.domains}
        return Detection(scores, tuple(above), self.threshold, {d: ids for d, ids in evidence.items() if ids},
                         self.classifier.version, sentences)
