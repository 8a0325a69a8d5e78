"""CPU the output gate spends cutting an answer into sentences, from 1 KB to 256 KB (issue 43, finding 9).

Each row gates one answer of prose (legal and medical sentences, citations and abbreviations among them) with
no validators, so what is timed is the gate itself: cutting into sentences, and with `pii` the output PII
screen every sentence passes. Modes:

- `at_once`: the whole answer in one delta, as a non-streaming upstream hands it over;
- `streamed`: 4-character deltas, as a streaming engine sends them (the gate asks after each delta whether
  a sentence is complete, on the event loop);
- `one_sentence`: one 4-character-delta stream with no sentence end in it at all (lowercase after each stop);
- `marks`: one run of "!" as long as the answer, streamed.

`resplit` rows run the algorithm before the fix (the validators' splitter over the whole remaining buffer
for every sentence and every delta; here with the splitter's linear boundary pattern, so `resplit_marks` is
far faster than it was) for comparison, up to --resplit-up-to KB: it is quadratic.

Columns: CPU seconds (best of --repeats), and `x2`: time(2n) / time(n), ~2 when linear, ~4 when quadratic.

Run: python -m benchmarks.gate_release [--json] [--repeats 3] [--resplit-up-to 32]
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
import time
from collections.abc import Callable

from auditor.gate.gate import NoClaimVerifier, OutputGate
from auditor.gate.sentence_cut import complete_sentence_end

SIZES_KB = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SENTENCES = ["Metformin is a first-line treatment for type 2 diabetes.", "It lowers glucose!",
             "See Miranda v. Arizona, 384 U.S. 436 (1966).", "Is the maximum dose 2,550 mg/day?",
             "The label says so.[1]", "Dr. Smith agreed with the plan.\n", "\"Quoted,\" he said.",
             "Call the clinic on 555-0100 or write to care@example.org for an appointment."]


class _ResplittingGate(OutputGate):
    """The gate as it was: every check re-splits the whole remaining buffer."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._old_buffer = ""

    def buffer(self, delta: str) -> bool:
        self._old_buffer += delta
        return complete_sentence_end(self._old_buffer) is not None

    def release_complete(self) -> str:
        released = []
        while not self.refused and (end := complete_sentence_end(self._old_buffer)) is not None:
            sentence, self._old_buffer = self._old_buffer[:end], self._old_buffer[end:]
            released.append(self._gate(sentence))
        return "".join(released)

    def finish(self) -> str:
        rest, self._old_buffer = self._old_buffer, ""
        return self._gate(rest) if rest else ""


def prose(size: int) -> str:
    rng, parts, total = random.Random(size), [], 0
    while total < size:
        parts.append(rng.choice(SENTENCES))
        total += len(parts[-1]) + 1
    return " ".join(parts)[:size]


def one_sentence(size: int) -> str:
    return ("the answer goes on without a capital after a stop. " * (size // 50 + 1))[:size]


def marks(size: int) -> str:
    return "Wow" + "!" * (size - 6) + " ok"


def run(gate_class: type[OutputGate], text: str, step: int | None, pii: bool) -> None:
    gate = gate_class(NoClaimVerifier(), domain=None, prompt=None, pii_action="redact" if pii else "allow")
    deltas = [text] if step is None else [text[i:i + step] for i in range(0, len(text), step)]
    for delta in deltas:
        if gate.buffer(delta):
            gate.release_complete()
    gate.finish()


def cpu_seconds(fn: Callable[[], None], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return best


CASES: dict[str, tuple[Callable[[int], str], int | None, bool]] = {
    "at_once": (prose, None, False),
    "at_once_pii": (prose, None, True),
    "streamed": (prose, 4, False),
    "streamed_pii": (prose, 4, True),
    "one_sentence": (one_sentence, 4, False),
    "marks": (marks, 4, False),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--resplit-up-to", type=int, default=32, metavar="KB",
                        help="largest size the old, quadratic algorithm is run at (0: never)")
    parser.add_argument("--max-kb", type=int, default=256)
    args = parser.parse_args(argv)
    sizes = [kb for kb in SIZES_KB if kb <= args.max_kb]
    rows: dict[str, dict[str, float | None]] = {}
    for gate_name, gate_class, limit in (("", OutputGate, max(sizes)), ("resplit_", _ResplittingGate,
                                                                        args.resplit_up_to)):
        for case, (make, step, pii) in CASES.items():
            if gate_class is _ResplittingGate and case.endswith("_pii"):
                continue
            timings: dict[str, float | None] = {}
            for kb in sizes:
                if kb > limit:
                    timings[str(kb)] = None
                    continue
                text = make(kb * 1024)
                once = functools.partial(run, gate_class, text, step, pii)
                timings[str(kb)] = round(cpu_seconds(once, args.repeats), 5)
                print(f"{gate_name}{case} {kb} KB: {timings[str(kb)]} s", file=sys.stderr, flush=True)
            rows[gate_name + case] = timings
    ratios = {name: {str(kb): _ratio(timings, kb) for kb in sizes[1:]} for name, timings in rows.items()}
    result = {"sizes_kb": sizes, "cpu_seconds": rows, "x2": ratios, "repeats": args.repeats}
    if args.json:
        print(json.dumps(result))
    else:
        _table(result)
    return 0


def _ratio(timings: dict[str, float | None], kb: int) -> float | None:
    now, before = timings.get(str(kb)), timings.get(str(kb // 2))
    return round(now / before, 2) if now and before else None


def _table(result: dict) -> None:
    sizes = result["sizes_kb"]
    print(f"{'mode':22s}" + "".join(f"{str(kb) + ' KB':>16s}" for kb in sizes))
    for name, timings in result["cpu_seconds"].items():
        cells = []
        for kb in sizes:
            seconds, ratio = timings[str(kb)], result["x2"][name].get(str(kb))
            cells.append("-" if seconds is None else f"{seconds:.4f}" + (f" x{ratio:.1f}" if ratio else ""))
        print(f"{name:22s}" + "".join(f"{cell:>16s}" for cell in cells))
    print("CPU seconds, best of", result["repeats"], "runs; xN = time(2n) / time(n): ~2 linear, ~4 quadratic")


if __name__ == "__main__":
    raise SystemExit(main())
