"""Verdict quality of `rules.verify` on blind chatbot answers with planted, labelled claims.

Data: `benchmarks/data/answers_<domain>.jsonl` (written blind to the code; format and conventions in
`benchmarks/data/answers_notes/`). Each row holds an `answer` and `claims`, each claim a `span` (an exact
substring occurring once in the answer), a real-world `label` (true/false) and a `kind`. The whole answer
is verified (`rules.verify(answer, domain, prompt=prompt)`), and each planted claim is scored by the
returned claims whose character span overlaps the planted span (half-open intervals that share at least
one character).

Verdict of a planted claim, from the returned claims that overlap it:
- none overlaps: `missing` (not covered);
- any overlapping claim is contradicted: `contradicted` (an error flag anywhere on the span counts);
- else any is supported: `supported` (so "supported" means every overlapping *verified* claim is
  supported: none contradicts it);
- else (all overlapping claims unverifiable): `unverifiable`.
A returned claim that overlaps several planted claims counts for each of them: a span that runs over a
neighbouring claim is scored as a verdict on that claim too (issue 19, pattern 9).

Keys, per domain, overall, per `kind` and per row shape (a claim counts under every shape of its row):
- false_supported: false planted claims judged `supported` / false planted claims (target 0);
- contradicted_recall: false planted claims judged `contradicted` / false planted claims;
- false_alarm: true planted claims judged `contradicted` / true planted claims;
- confirm_rate: true planted claims judged `supported` / true planted claims;
- coverage: planted claims with any overlapping returned claim / planted claims;
- unplanted_contradicted: returned contradicted claims that overlap no planted claim (the sets leave no
  deliberate error in unlabelled text, so these are most likely false alarms; informative, no target).

Splits (issue 40): every labelled set is split into dev and test. The first round's sets
(`benchmarks/data/answers_<domain>.jsonl`) were tuned on and are dev whole. Each later round
(`benchmarks/data/round<N>/answers_<domain>.jsonl`, written blind to the code and frozen before any tuning) is split
by a hash of its row ids: a third dev, two thirds test. Results are reported per split side by side; `--failures`
prints dev failures only, never a test row: the test split is judged by its aggregate numbers alone.

Reliability (per split): the planted claims that got a verdict (supported or contradicted), binned by the confidence
the verifier reported, with the share of them that were right in each bin and the expected calibration error.
Fabricated references (kinds `fabricated_*`) are counted by outcome; rows tagged `mixed_domain` get their own row.

Errata: `benchmarks/data/answers_errata.jsonl` names rows whose label is wrong by real-world fact
({"id", "span", "label": corrected, "source", "reason"}); the answer files themselves are frozen. The raw
numbers are the headline; `errata_applied` repeats the domain/overall keys with the corrected labels.

Run: python -m benchmarks.verify_answers --json [--failures] [--split dev|test] [--domain medical] [--file extra.jsonl]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
DOMAINS = ("finance", "legal", "medical")
ERRATA = DATA / "answers_errata.jsonl"
KEYS = ("false_supported", "contradicted_recall", "false_alarm", "confirm_rate", "coverage")
ROUNDS = sorted(p for p in DATA.glob("round*") if p.is_dir())
FABRICATED = ("fabricated_reference", "fabricated_citation", "fabricated_unknown")
BINS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.01)


def split_of(set_name: str, row_id: str) -> str:
    """dev or test: the first round is dev (tuned on); a later round's row is dev for a third of the id hashes."""
    if set_name == "round1":
        return "dev"
    digest = hashlib.sha256(f"{set_name}:{row_id}".encode()).digest()
    return "dev" if digest[0] % 3 == 0 else "test"


@dataclass(frozen=True, slots=True)
class Scored:
    """One planted claim with the verdict the returned claims give it."""

    row_id: str
    domain: str
    span: str
    start: int
    end: int
    label: bool
    kind: str
    shapes: tuple[str, ...]
    verdict: str                    # supported | contradicted | unverifiable | missing
    returned: tuple[str, ...]       # "verdict kind [start,end) 'text'" of the overlapping returned claims
    split: str = "dev"
    confidence: float | None = None  # of the returned claims that gave the verdict (the highest)
    possible_fabrication: bool = False


def load_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_errata(path: Path = ERRATA) -> dict[tuple[str, str], bool]:
    """(row id, span) -> corrected label."""
    if not path.is_file():
        return {}
    return {(e["id"], e["span"]): bool(e["label"]) for e in load_rows(path)}


def planted_verdict(overlapping: Iterable[str]) -> str:
    verdicts = set(overlapping)
    if not verdicts:
        return "missing"
    for verdict in ("contradicted", "supported"):
        if verdict in verdicts:
            return verdict
    return "unverifiable"


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def score_row(row: dict[str, Any], domain: str, split: str = "dev") -> tuple[list[Scored], list[str]]:
    """The planted claims of one row with their verdicts, and the unplanted contradicted claims (described)."""
    from rules import verify

    answer = row["answer"]
    report = verify(answer, domain, prompt=row.get("prompt"))
    planted: list[tuple[dict[str, Any], tuple[int, int]]] = []
    for claim in row.get("claims", []):
        start = answer.find(claim["span"])
        if start < 0:
            raise ValueError(f"{row['id']}: span not in answer: {claim['span']!r}")
        planted.append((claim, (start, start + len(claim["span"]))))
    scored = []
    for claim, span in planted:
        hits = [c for c in report.claims if overlaps(tuple(c.span), span)]
        verdict = planted_verdict(c.verdict for c in hits)
        scored.append(Scored(
            row_id=row["id"], domain=domain, span=claim["span"], start=span[0], end=span[1],
            label=bool(claim["label"]), kind=claim.get("kind", "?"), shapes=tuple(row.get("shapes", [])),
            verdict=verdict,
            returned=tuple(f"{c.verdict} {c.kind} [{c.span[0]},{c.span[1]}) {c.text!r}" for c in hits),
            split=split,
            confidence=max((c.confidence for c in hits if c.verdict == verdict), default=None),
            possible_fabrication=any(e.kind == "possible_fabrication" for c in hits for e in c.evidence),
        ))
    unplanted = [f"[{row['id']}] contradicted {c.kind} [{c.span[0]},{c.span[1]}) {c.text!r}" for c in report.claims
                 if c.verdict == "contradicted" and not any(overlaps(tuple(c.span), span) for _, span in planted)]
    return scored, unplanted


def metrics(items: list[Scored], labels: dict[tuple[str, str], bool] | None = None) -> dict[str, Any]:
    """The five keys over `items`; `labels` overrides labels by (row id, span) (errata)."""
    labels = labels or {}

    def label_of(item: Scored) -> bool:
        return labels.get((item.row_id, item.span), item.label)

    false = [i for i in items if not label_of(i)]
    true = [i for i in items if label_of(i)]
    return {
        "false_supported": _ratio(sum(i.verdict == "supported" for i in false), len(false)),
        "contradicted_recall": _ratio(sum(i.verdict == "contradicted" for i in false), len(false)),
        "false_alarm": _ratio(sum(i.verdict == "contradicted" for i in true), len(true)),
        "confirm_rate": _ratio(sum(i.verdict == "supported" for i in true), len(true)),
        "coverage": _ratio(sum(i.verdict != "missing" for i in items), len(items)),
        "claims": len(items),
        "false_claims": len(false),
        "true_claims": len(true),
    }


def _ratio(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 4) if denominator else None


def is_failure(item: Scored, label: bool) -> bool:
    """A planted claim the targets count against: false not contradicted, true not supported."""
    return item.verdict != ("supported" if label else "contradicted")


def evaluate(sources: dict[str, list[dict[str, Any]]], splits: dict[str, str] | None = None
             ) -> tuple[list[Scored], dict[str, list[str]], float]:
    """Score every row; `splits` maps a row id to its split (dev when absent). Unplanted contradicted claims are
    kept per split and domain ("test:finance")."""
    items: list[Scored] = []
    unplanted: dict[str, list[str]] = defaultdict(list)
    started = time.perf_counter()
    for domain, rows in sources.items():
        for row in rows:
            split = (splits or {}).get(row["id"], "dev")
            scored, extra = score_row(row, row.get("domain", domain) if row.get("domain") in DOMAINS else domain, split)
            items += scored
            unplanted[f"{split}:{domain}"] += extra
    return items, dict(unplanted), time.perf_counter() - started


def reliability(items: list[Scored]) -> dict[str, Any]:
    """Confidence bins of the planted claims that got a verdict, with the share that was right, and the ECE."""
    judged = [i for i in items if i.verdict in ("supported", "contradicted") and i.confidence is not None]
    rows = []
    error = 0.0
    for low, high in zip(BINS, BINS[1:], strict=False):
        members = [i for i in judged if low <= i.confidence < high]  # type: ignore[operator]
        if not members:
            continue
        right = sum((i.verdict == "supported") == i.label for i in members)
        mean = sum(i.confidence for i in members) / len(members)  # type: ignore[misc]
        accuracy = right / len(members)
        error += abs(mean - accuracy) * len(members)
        rows.append({"bin": f"[{low:.1f}, {min(high, 1.0):.1f}]", "claims": len(members), "mean_confidence": round(mean, 3),
                     "right": round(accuracy, 3)})
    below = sum(1 for i in judged if i.confidence < BINS[0])  # type: ignore[operator]
    return {"bins": rows, "below_0.5": below, "ece": round(error / len(judged), 4) if judged else None}


def fabrication_outcomes(items: list[Scored]) -> dict[str, int]:
    """Fabricated references by what the verifier did with them."""
    outcomes = {"contradicted": 0, "possible_fabrication": 0, "unverifiable": 0, "supported": 0, "no_claim": 0}
    for item in items:
        if item.kind not in FABRICATED or item.label:
            continue
        if item.verdict == "missing":
            outcomes["no_claim"] += 1
        elif item.verdict == "unverifiable" and item.possible_fabrication:
            outcomes["possible_fabrication"] += 1
        else:
            outcomes[item.verdict] += 1
    return outcomes


def summarise_splits(items: list[Scored], unplanted: dict[str, list[str]], errata: dict[tuple[str, str], bool]
                     ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for split in ("dev", "test"):
        mine = [i for i in items if i.split == split]
        if not mine:
            continue
        own = {key.split(":", 1)[1]: found for key, found in unplanted.items() if key.startswith(f"{split}:")}
        summary = summarise(mine, own, errata)
        summary["reliability"] = reliability(mine)
        summary["fabricated_references"] = fabrication_outcomes(mine)
        mixed = [i for i in mine if "mixed_domain" in i.shapes]
        summary["mixed_domain"] = metrics(mixed) if mixed else None
        if split == "test":
            summary.pop("by_kind")     # kinds name facts; the test split reports by domain and shape only
        out[split] = summary
    return out


def summarise(items: list[Scored], unplanted: dict[str, list[str]], errata: dict[tuple[str, str], bool]) -> dict[str, Any]:
    by_domain: dict[str, list[Scored]] = defaultdict(list)
    by_kind: dict[str, list[Scored]] = defaultdict(list)
    by_shape: dict[str, list[Scored]] = defaultdict(list)
    for item in items:
        by_domain[item.domain].append(item)
        by_kind[f"{item.domain}:{item.kind}"].append(item)
        for shape in item.shapes:
            by_shape[f"{item.domain}:{shape}"].append(item)
    domains = {d: {**metrics(v), "unplanted_contradicted": len(unplanted.get(d, []))} for d, v in sorted(by_domain.items())}
    overall = {**metrics(items), "unplanted_contradicted": sum(len(u) for u in unplanted.values())}
    applied = {d: metrics(v, errata) for d, v in sorted(by_domain.items())}
    applied["overall"] = metrics(items, errata)
    return {
        "domains": domains,
        "overall": overall,
        "errata_applied": {"errata": len(errata), **applied},
        "by_kind": {k: metrics(v) for k, v in sorted(by_kind.items())},
        "by_shape": {k: metrics(v) for k, v in sorted(by_shape.items())},
    }


def print_failures(items: list[Scored], errata: dict[tuple[str, str], bool]) -> None:
    for item in items:
        label = errata.get((item.row_id, item.span), item.label)
        if not is_failure(item, label):
            continue
        print(f"[{item.row_id}] {'TRUE ' if label else 'FALSE'} {item.kind:22s} -> {item.verdict:12s} "
              f"[{item.start},{item.end}) {item.span!r}", file=sys.stderr)
        for returned in item.returned:
            print(f"      {returned}", file=sys.stderr)


def _table(result: dict[str, Any]) -> str:
    lines = []
    for split in ("dev", "test"):
        part = result.get(split)
        if part is None:
            continue
        lines.append(f"{split}  {'false_sup':>9s} {'c_recall':>9s} {'f_alarm':>9s} {'confirm':>9s} {'coverage':>9s} "
                     f"{'claims':>6s} {'unplanted_c':>11s}")
        for name, m in [*part["domains"].items(), ("overall", part["overall"])]:
            cells = " ".join(f"{m[k]:9.3f}" if m[k] is not None else f"{'-':>9s}" for k in KEYS)
            lines.append(f"  {name:8s} {cells} {m['claims']:6d} {m['unplanted_contradicted']:11d}")
        reliability_rows = ", ".join(f"{b['bin']} {b['claims']} right {b['right']:.2f}" for b in part["reliability"]["bins"])
        lines.append(f"  reliability (ECE {part['reliability']['ece']}): {reliability_rows}")
        lines.append(f"  fabricated references: {part['fabricated_references']}")
    return "\n".join(lines)


def load_sources(domains: list[str] | None, files: list[Path]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """Rows per domain and each row's split: the given files (dev), or the first round and every later round."""
    sources: dict[str, list[dict[str, Any]]] = defaultdict(list)
    splits: dict[str, str] = {}
    if files:
        for path in files:
            for row in load_rows(path):
                sources[row["domain"]].append(row)
    else:
        for domain in DOMAINS:
            sources[domain] += load_rows(DATA / f"answers_{domain}.jsonl")
            for folder in ROUNDS:
                path = folder / f"answers_{domain}.jsonl"
                if path.is_file():
                    for row in load_rows(path):
                        splits[row["id"]] = split_of(folder.name, row["id"])
                        sources[domain].append(row)
    return {d: rows for d, rows in sources.items() if d in DOMAINS and (not domains or d in domains)}, splits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--domain", choices=DOMAINS, action="append", help="limit to a domain (repeatable)")
    parser.add_argument("--split", choices=("dev", "test"), help="score one split only")
    parser.add_argument("--file", type=Path, action="append", default=[],
                        help="score another answer file of the same format instead, as dev (repeatable; rows name "
                             "their domain)")
    parser.add_argument("--failures", action="store_true",
                        help="print each dev planted claim that misses its target (span and what came back), then each "
                             "unplanted contradicted claim of dev, on stderr; test rows are never printed")
    args = parser.parse_args(argv)
    try:
        sources, splits = load_sources(args.domain, args.file)
    except (OSError, ValueError, KeyError) as exc:
        print(f"verify_answers: cannot read the answer files: {exc}", file=sys.stderr)
        return 2
    if args.split:
        sources = {d: [r for r in rows if splits.get(r["id"], "dev") == args.split] for d, rows in sources.items()}
    errata = load_errata()
    items, unplanted, seconds = evaluate(sources, splits)
    result = {"benchmark": "verify_answers", **summarise_splits(items, unplanted, errata), "seconds": round(seconds, 2)}
    if args.failures:
        print_failures([i for i in items if i.split == "dev"], errata)
        for key in sorted(k for k in unplanted if k.startswith("dev:")):
            for described in unplanted[key]:
                print(f"unplanted: {described}", file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    else:
        print(_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
