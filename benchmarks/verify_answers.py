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

Errata: `benchmarks/data/answers_errata.jsonl` names rows whose label is wrong by real-world fact
({"id", "span", "label": corrected, "source", "reason"}); the answer files themselves are frozen. The raw
numbers are the headline; `errata_applied` repeats the domain/overall keys with the corrected labels.

Run: python -m benchmarks.verify_answers --json [--failures] [--domain medical] [--file extra.jsonl]
"""

from __future__ import annotations

import argparse
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


def score_row(row: dict[str, Any], domain: str) -> tuple[list[Scored], list[str]]:
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
        scored.append(Scored(
            row_id=row["id"], domain=domain, span=claim["span"], start=span[0], end=span[1],
            label=bool(claim["label"]), kind=claim.get("kind", "?"), shapes=tuple(row.get("shapes", [])),
            verdict=planted_verdict(c.verdict for c in hits),
            returned=tuple(f"{c.verdict} {c.kind} [{c.span[0]},{c.span[1]}) {c.text!r}" for c in hits),
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


def evaluate(sources: dict[str, list[dict[str, Any]]]) -> tuple[list[Scored], dict[str, list[str]], float]:
    items: list[Scored] = []
    unplanted: dict[str, list[str]] = defaultdict(list)
    started = time.perf_counter()
    for domain, rows in sources.items():
        for row in rows:
            scored, extra = score_row(row, row.get("domain", domain) if row.get("domain") in DOMAINS else domain)
            items += scored
            unplanted[domain] += extra
    return items, dict(unplanted), time.perf_counter() - started


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
    lines = [f"{'':10s} {'false_sup':>9s} {'c_recall':>9s} {'f_alarm':>9s} {'confirm':>9s} {'coverage':>9s} "
             f"{'claims':>6s} {'unplanted_c':>11s}"]
    rows = [*result["domains"].items(), ("overall", result["overall"])]
    for name, m in rows:
        cells = " ".join(f"{m[k]:9.3f}" if m[k] is not None else f"{'-':>9s}" for k in KEYS)
        lines.append(f"{name:10s} {cells} {m['claims']:6d} {m['unplanted_contradicted']:11d}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--domain", choices=DOMAINS, action="append", help="limit to a domain (repeatable)")
    parser.add_argument("--file", type=Path, action="append", default=[],
                        help="score another answer file of the same format instead (repeatable; rows name their domain)")
    parser.add_argument("--failures", action="store_true",
                        help="print each planted claim that misses its target (span and what came back), then each "
                             "unplanted contradicted claim, on stderr")
    args = parser.parse_args(argv)
    try:
        if args.file:
            sources: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for path in args.file:
                for row in load_rows(path):
                    sources[row["domain"]].append(row)
            sources = {d: rows for d, rows in sources.items() if d in DOMAINS and (not args.domain or d in args.domain)}
        else:
            sources = {d: load_rows(DATA / f"answers_{d}.jsonl") for d in args.domain or DOMAINS}
    except (OSError, ValueError, KeyError) as exc:
        print(f"verify_answers: cannot read the answer files: {exc}", file=sys.stderr)
        return 2
    errata = load_errata()
    items, unplanted, seconds = evaluate(sources)
    result = {"benchmark": "verify_answers", **summarise(items, unplanted, errata), "seconds": round(seconds, 2)}
    if args.failures:
        print_failures(items, errata)
        for described in (u for domain in sorted(unplanted) for u in unplanted[domain]):
            print(f"unplanted: {described}", file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    else:
        print(_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
