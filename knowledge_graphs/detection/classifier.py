"""The domain classifier: one logistic regression per domain (domain vs. everything else, off-domain chat
included) over a text's mean MiniLM sentence embedding plus its KG evidence counts.

Weights live in `data/classifier.json`, written by `python -m knowledge_graphs.detection.train` from the
hand-written texts beside it; inference is one matrix product in numpy.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_graphs.detection.evidence import FEATURES

DATA_DIR = Path(__file__).parent / "data"
CLASSIFIER_PATH = DATA_DIR / "classifier.json"
# KG counts enter as KG_FEATURE_SCALE * log(1 + count): scaled down so that the L2 penalty keeps their
# weights small. Measured on the training texts (5-fold, grouped): at full scale a chemistry answer naming
# "chlorine" and "iodine" was pushed over the threshold; at 0.1 the counts only tip close calls.
KG_FEATURE_SCALE = 0.1


class ClassifierUnavailableError(RuntimeError):
    """The classifier file is missing or does not match the code's features."""


def kg_feature_vector(counts: dict[str, int]) -> np.ndarray:
    return np.array([KG_FEATURE_SCALE * math.log1p(counts.get(name, 0)) for name in FEATURES], dtype=np.float32)


@dataclass(frozen=True, slots=True)
class DomainClassifier:
    domains: tuple[str, ...]
    weights: np.ndarray          # [n_domains, embedding_dim + len(FEATURES)]
    bias: np.ndarray             # [n_domains]
    version: str                 # sha256 of the classifier file (stored with every detection)
    trained_on: dict[str, Any]   # provenance of the training data

    def scores(self, embedding: np.ndarray, kg_features: np.ndarray) -> dict[str, float]:
        """Per domain, the probability that the text belongs to it (independent sigmoids: several may be high)."""
        x = np.concatenate([embedding, kg_features])               # [dim + n_features]
        logits = self.weights @ x + self.bias                      # [n_domains]
        probabilities = 1.0 / (1.0 + np.exp(-logits))
        return {domain: float(p) for domain, p in zip(self.domains, probabilities, strict=True)}


@lru_cache(maxsize=4)
def load_classifier(path: Path = CLASSIFIER_PATH) -> DomainClassifier:
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, json.JSONDecodeError) as exc:
        raise ClassifierUnavailableError(f"cannot read the domain classifier {path}: {exc}") from exc
    if tuple(data.get("kg_features", ())) != FEATURES:
        raise ClassifierUnavailableError(f"{path} was trained on other KG features; rerun "
                                         "`python -m knowledge_graphs.detection.train`")
    return DomainClassifier(
        domains=tuple(data["domains"]), weights=np.array(data["weights"], dtype=np.float32),
        bias=np.array(data["bias"], dtype=np.float32), version=hashlib.sha256(raw).hexdigest()[:16],
        trained_on=data["trained_on"],
    )
