"""Quality of `rules.verify` on the labelled claim sets `benchmarks/data/claims_<domain>.jsonl`.

Each line is one short text with the verdict a careful reviewer expects. A text is predicted
contradicted when any claim in it is contradicted, supported when at least one claim is supported and
none is contradicted, and unverifiable otherwise. Per domain:

- contradicted_precision: of the texts judged contradicted, the share labelled contradicted;
- contradicted_recall: of the texts labelled contradicted, the share judged contradicted;
- false_supported_rate: of the texts labelled contradicted, the share judged supported (a wrong claim
  passed as fine; the target is 0).

Run: python -m benchmarks.verify_quality --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
DOMAINS = ("finance", "medical", "legal")


def load_claims(domain: str) -> list[dict[str, Any]]:
    path = DATA / f"claims_{domain}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def predict(verdicts: list[str]) -> str:
    if "contradicted" in verdicts:
        return "contradicted"
    if "supported" in verdicts:
        return "supported"
    return "unverifiable"


def evaluate(domain: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from rules import verify

    rows = load_claims(domain)
    confusion: Counter[tuple[str, str]] = Counter()
    misses: list[dict[str, Any]] = []
    started = time.perf_counter()
    for row in rows:
        report = verify(row["text"], domain)
        predicted = predict([c.verdict for c in report.claims])
        confusion[(row["label"], predicted)] += 1
        if predicted != row["label"]:
            misses.append({"text": row["text"], "label": row["label"], "predicted": predicted})
    elapsed = time.perf_counter() - started
    labelled_contradicted = sum(n for (label, _), n in confusion.items() if label == "contradicted")
    judged_contradicted = sum(n for (_, pred), n in confusion.items() if pred == "contradicted")
    true_contradicted = confusion[("contradicted", "contradicted")]
    result = {
        "claims": len(rows),
        "labels": dict(Counter(r["label"] for r in rows)),
        "contradicted_precision": _ratio(true_contradicted, judged_contradicted),
        "contradicted_recall": _ratio(true_contradicted, labelled_contradicted),
        "false_supported_rate": _ratio(confusion[("contradicted", "supported")], labelled_contradicted),
        "supported_recall": _ratio(confusion[("supported", "supported")],
                                   sum(n for (label, _), n in confusion.items() if label == "supported")),
        "accuracy": _ratio(sum(n for (label, pred), n in confusion.items() if label == pred), len(rows)),
        "confusion": {f"{label}->{pred}": n for (label, pred), n in sorted(confusion.items())},
        "seconds": round(elapsed, 3),
    }
    return result, misses


def _ratio(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 4) if denominator else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--domain", choices=DOMAINS, action="append", help="limit to a domain (repeatable)")
    parser.add_argument("--show-misses", action="store_true", help="list misjudged texts on stderr")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    for domain in args.domain or DOMAINS:
        results[domain], misses = evaluate(domain)
        if args.show_misses:
            for miss in misses:
                print(f"[{domain}] {miss['label']} -> {miss['predicted']}: {miss['text']}", file=sys.stderr)
    if args.json:
        print(json.dumps({"benchmark": "verify_quality", "domains": results}))
    else:
        for domain, result in results.items():
            print(f"{domain:8s} P={result['contradicted_precision']} R={result['contradicted_recall']} "
                  f"false_supported={result['false_supported_rate']} acc={result['accuracy']} n={result['claims']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
