"""Domain detection on the blind answer sets, with the domain withheld.

Data (frozen, never trained on): `benchmarks/data/answers_{finance,legal,medical}.jsonl` (each row labelled
with its domain) and `benchmarks/data/offdomain_chat.jsonl` (ordinary chat, domain "none"). Each row is
detected from its prompt and answer, as the service does for a request without X-Domain.

- accuracy[domain]: share of the domain's rows whose best detected domain (above the threshold) is the label;
- verified_under_label[domain]: share of its rows where the label is among the detected domains (the row's
  claims are then checked by the right validators, whichever domain scored highest);
- also_detected[domain]: share of its rows where another domain passed the threshold too (verified twice);
- offdomain_false_positive: share of off-domain rows sent to any validator (any domain above the threshold);
- kg_only: the same numbers for KG linking alone (a domain is detected when it has KG evidence; the domain
  with the most evidence entities wins), the alternative the classifier was measured against;
- prompt_only: detection from the prompt alone (what the request path knows before the first token);
- latency_ms: per request (prompt + whole answer, every text seen for the first time), p50 / p99, and per
  streamed sentence (the incremental cost the output gate pays), after one warm-up detection; the model
  load is reported apart. For scale, the output gate's own validators (`RulesVerifier.verify` under the
  row's domain) are timed on the same sentences, interleaved with detection, so both see the same load.

Run: python -m benchmarks.domain_detection --json [--repeats N] [--threads N]
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import emit, log, parse_args

DATA = Path(__file__).parent / "data"
DOMAINS = ("finance", "legal", "medical")


def load_rows() -> list[dict[str, Any]]:
    rows = []
    for name in [f"answers_{d}.jsonl" for d in DOMAINS] + ["offdomain_chat.jsonl"]:
        rows += [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows


def score(rows: list[dict[str, Any]], detected: list[tuple[str, ...]]) -> dict[str, Any]:
    accuracy, verified, also = {}, {}, {}
    for domain in DOMAINS:
        mine = [found for row, found in zip(rows, detected, strict=True) if row["domain"] == domain]
        accuracy[domain] = round(sum(1 for f in mine if f[:1] == (domain,)) / len(mine), 4)
        verified[domain] = round(sum(1 for f in mine if domain in f) / len(mine), 4)
        also[domain] = round(sum(1 for f in mine if len(f) > 1) / len(mine), 4)
    in_domain = [(row, f) for row, f in zip(rows, detected, strict=True) if row["domain"] in DOMAINS]
    off = [f for row, f in zip(rows, detected, strict=True) if row["domain"] == "none"]
    return {"accuracy": accuracy,
            "accuracy_overall": round(sum(1 for row, f in in_domain if f[:1] == (row["domain"],)) / len(in_domain), 4),
            "verified_under_label": verified, "also_detected": also,
            "offdomain_false_positive": round(sum(1 for f in off if f) / len(off), 4),
            "offdomain_sent_to": dict(Counter(d for f in off for d in f))}


def kg_only(detector: Any, row: dict[str, Any]) -> tuple[str, ...]:
    hits = detector.evidence.hits(f"{row['prompt']}\n{row['answer']}")
    counts = Counter(hit.domain for hit in hits)
    return tuple(sorted(counts, key=lambda d: -counts[d]))


def percentile(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)) * 1000, 2)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from knowledge_graphs import load_kg
    from knowledge_graphs.detection import DomainDetector
    from knowledge_graphs.detection.detector import split_for_detection
    from knowledge_graphs.minilm import load_encoder

    rows = load_rows()
    started = time.perf_counter()
    kgs = {d: load_kg(d) for d in DOMAINS}
    kg_load_s = time.perf_counter() - started
    started = time.perf_counter()
    load_encoder()
    detector = DomainDetector(kgs)
    detector.detect("warm-up", "One sentence to load the model.")
    load_s = time.perf_counter() - started
    from auditor.serving.runtime import RulesVerifier

    verifier = RulesVerifier(kgs)
    verifier.warm_up()
    log(f"{len(rows)} rows; KGs {kg_load_s:.1f}s, model + linkers {load_s:.1f}s")

    repeats = args.repeats or 1
    per_request: list[float] = []
    per_sentence: list[float] = []
    per_sentence_verify: list[float] = []
    full, prompt_only = [], []
    for repeat in range(repeats):
        for row in rows:
            start = time.perf_counter()
            detection = detector.detect(row["prompt"], row["answer"])
            per_request.append(time.perf_counter() - start)
            state = detector.start(row["prompt"])
            if repeat == 0:
                full.append(detection.domains)
                prompt_only.append(state.result().domains)
            for sentence in split_for_detection(row["answer"])[:3]:
                start = time.perf_counter()
                state.add(sentence)
                per_sentence.append(time.perf_counter() - start)
                if row["domain"] in DOMAINS:
                    start = time.perf_counter()
                    verifier.verify(sentence, domain=row["domain"], prompt=row["prompt"])
                    per_sentence_verify.append(time.perf_counter() - start)
    result = {
        "rows": {d: sum(1 for r in rows if r["domain"] == d) for d in (*DOMAINS, "none")},
        "threshold": detector.threshold, "classifier": detector.version,
        **score(rows, full),
        "kg_only": score(rows, [kg_only(detector, row) for row in rows]),
        "prompt_only": score(rows, prompt_only),
        "latency_ms": {"per_request_p50": percentile(per_request, 50), "per_request_p99": percentile(per_request, 99),
                       "per_streamed_piece_p50": percentile(per_sentence, 50),
                       "per_streamed_piece_p99": percentile(per_sentence, 99),
                       "gate_verify_per_piece_p50": percentile(per_sentence_verify, 50),
                       "gate_verify_per_piece_p99": percentile(per_sentence_verify, 99),
                       "requests_timed": len(per_request), "model_and_linkers_load_s": round(load_s, 2)},
        "threads": args.threads, "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
