"""Throughput of `rules.verify` on ~150-word answers, per domain, on text it has not seen before.

Answers are built from the labelled claim sets (several claims joined until an answer reaches 150
words), so they hold as many checkable claims as a dense real answer. KGs, packs and registries are
loaded once before timing (a warm-up batch); domains are measured interleaved over several repeats
and the median is reported, per wall second and per second of the process's own CPU time (on a shared
machine the wall rate also counts time other processes held the core; the load average is reported).

The same answers come back on every repeat, and their sentences recur across answers, so the memo caches
keyed by an answer's or a sentence's text (`rules.text_caches`) are cleared before each answer: the
headline rates are the regime a user meets, new text every time. The `repeated` rates verify the same
answers with those caches kept, for comparison (what this benchmark measured until 2026-12-03).

Memos: the cost of one ~500-word answer (the long forms of issue 40), fresh caches, median ms per answer per domain,
timed in the same interleaved repeats (`memo_ms_per_answer`).

Run: python -m benchmarks.verify_throughput --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

from benchmarks.verify_quality import DOMAINS, load_claims

WORDS_PER_ANSWER = 150


def build_answers(domain: str, count: int, words_per_answer: int = WORDS_PER_ANSWER) -> list[str]:
    texts = [row["text"] for row in load_claims(domain)]
    answers: list[str] = []
    cursor = 0
    while len(answers) < count:
        parts: list[str] = []
        words = 0
        while words < words_per_answer:
            text = texts[cursor % len(texts)]
            cursor += 1
            parts.append(text)
            words += len(text.split())
        answers.append(" ".join(parts))
    return answers


def timed_batch(answers: list[str], domain: str, *, before_each: Callable[[], None] | None = None,
                kg: object | None = None) -> tuple[float, float]:
    """(wall s, CPU s) spent inside `rules.verify` over the batch; `before_each` runs outside the clock."""
    from rules import verify

    wall = cpu = 0.0
    for text in answers:
        if before_each is not None:
            before_each()
        started, cpu_started = time.perf_counter(), time.process_time()
        verify(text, domain, kg=kg)  # type: ignore[arg-type]
        wall += time.perf_counter() - started
        cpu += time.process_time() - cpu_started
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--answers", type=int, default=100, help="answers per domain per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memos", type=int, default=10, help="~500-word answers per domain per repeat")
    args = parser.parse_args(argv)

    from rules import verify_many
    from rules.text_caches import clear_text_caches

    batches = {domain: build_answers(domain, args.answers) for domain in DOMAINS}
    memos = {domain: build_answers(domain, args.memos, 500) for domain in DOMAINS}
    memo_ms: dict[str, list[float]] = {domain: [] for domain in DOMAINS}
    load_seconds: dict[str, float] = {}
    for domain, answers in batches.items():      # warm-up: KG, automata, registries, phrase caches
        started = time.perf_counter()
        verify_many(answers[:20], domain)
        load_seconds[domain] = round(time.perf_counter() - started, 2)
    regimes = {"fresh": clear_text_caches, "repeated": None}
    rates: dict[tuple[str, str, str], list[float]] = {
        (regime, domain, clock): [] for regime in regimes for domain in DOMAINS for clock in ("wall", "cpu")}
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for domain, answers in batches.items():   # interleaved so background load hits every domain alike
            for regime, before_each in regimes.items():
                wall, cpu = timed_batch(answers, domain, before_each=before_each)
                rates[regime, domain, "wall"].append(len(answers) / wall)
                rates[regime, domain, "cpu"].append(len(answers) / cpu)
            if memos[domain]:
                wall, _ = timed_batch(memos[domain], domain, before_each=clear_text_caches)
                memo_ms[domain].append(1000 * wall / len(memos[domain]))
    load_after = os.getloadavg()
    words = {d: round(statistics.mean(len(a.split()) for a in batches[d]), 1) for d in DOMAINS}

    def median(regime: str, domain: str, clock: str) -> float:
        return round(statistics.median(rates[regime, domain, clock]), 1)

    result = {
        "benchmark": "verify_throughput",
        "answers_per_repeat": args.answers,
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "domains": {
            domain: {
                "outputs_per_s": median("fresh", domain, "wall"),
                "min_outputs_per_s": round(min(rates["fresh", domain, "wall"]), 1),
                # per second of this process's own CPU time: what one unshared core does (wall time on a
                # shared machine also counts the time other processes held the core)
                "outputs_per_cpu_s": median("fresh", domain, "cpu"),
                "memo_words": round(statistics.mean(len(a.split()) for a in memos[domain]), 1) if memos[domain] else None,
                "memo_ms_per_answer": round(statistics.median(memo_ms[domain]), 1) if memo_ms[domain] else None,
                "repeated": {"outputs_per_s": median("repeated", domain, "wall"),
                             "outputs_per_cpu_s": median("repeated", domain, "cpu")},
                "mean_words_per_answer": words[domain],
                "warmup_seconds_incl_kg_load": load_seconds[domain],
            }
            for domain in DOMAINS
        },
    }
    if args.json:
        print(json.dumps(result))
    else:
        for domain, values in result["domains"].items():
            print(f"{domain:8s} {values['outputs_per_s']:8.1f} outputs/s wall, {values['outputs_per_cpu_s']:8.1f} per CPU s "
                  f"(same answers again: {values['repeated']['outputs_per_cpu_s']:.1f} per CPU s; "
                  f"{values['mean_words_per_answer']} words/answer)")
        print(f"load average {result['load_average_before_after']} on {result['cpus']} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
