"""Throughput of `rules.verify_many` on ~150-word answers, per domain.

Answers are built from the labelled claim sets (several claims joined until an answer reaches 150
words), so they hold as many checkable claims as a dense real answer. KGs, packs and registries are
loaded once before timing (a warm-up batch); domains are measured interleaved over several repeats
and the median is reported, per wall second and per second of the process's own CPU time (on a shared
machine the wall rate also counts time other processes held the core).

Run: python -m benchmarks.verify_throughput --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from benchmarks.verify_quality import DOMAINS, load_claims

WORDS_PER_ANSWER = 150


def build_answers(domain: str, count: int) -> list[str]:
    texts = [row["text"] for row in load_claims(domain)]
    answers: list[str] = []
    cursor = 0
    while len(answers) < count:
        parts: list[str] = []
        words = 0
        while words < WORDS_PER_ANSWER:
            text = texts[cursor % len(texts)]
            cursor += 1
            parts.append(text)
            words += len(text.split())
        answers.append(" ".join(parts))
    return answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--answers", type=int, default=100, help="answers per domain per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    from rules import verify_many

    batches = {domain: build_answers(domain, args.answers) for domain in DOMAINS}
    load_seconds: dict[str, float] = {}
    for domain, answers in batches.items():      # warm-up: KG, automata, registries, caches
        started = time.perf_counter()
        verify_many(answers[:20], domain)
        load_seconds[domain] = round(time.perf_counter() - started, 2)
    rates: dict[str, list[float]] = {domain: [] for domain in DOMAINS}
    cpu_rates: dict[str, list[float]] = {domain: [] for domain in DOMAINS}
    for _ in range(args.repeats):
        for domain, answers in batches.items():   # interleaved so background load hits every domain alike
            started, cpu_started = time.perf_counter(), time.process_time()
            reports = verify_many(answers, domain)
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            assert len(reports) == len(answers)
            rates[domain].append(len(answers) / elapsed)
            cpu_rates[domain].append(len(answers) / cpu)
    words = {d: round(statistics.mean(len(a.split()) for a in batches[d]), 1) for d in DOMAINS}
    result = {
        "benchmark": "verify_throughput",
        "answers_per_repeat": args.answers,
        "repeats": args.repeats,
        "domains": {
            domain: {
                "outputs_per_s": round(statistics.median(rates[domain]), 1),
                "min_outputs_per_s": round(min(rates[domain]), 1),
                # per second of this process's own CPU time: what one unshared core does (wall time on a
                # shared machine also counts the time other processes held the core)
                "outputs_per_cpu_s": round(statistics.median(cpu_rates[domain]), 1),
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
                  f"({values['mean_words_per_answer']} words/answer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
