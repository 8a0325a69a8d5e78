"""Issue 43, finding 9: the output gate's sentence release cost is linear in the answer.

Each released sentence used to re-split the whole remaining buffer (and each streamed delta re-split the
unfinished sentence), so a 56 KB answer handed over at once took 45 s of CPU. The cost is measured here as
the characters handed to the sentence-boundary scanner, not as wall time, so the tests hold on a busy host.
The cut points must not move: they are compared with the old algorithm, kept below as the reference.
"""

from __future__ import annotations

import random
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

import auditor.gate.gate as gate_module
import rules.extraction.structure as structure
from auditor.gate.gate import NoClaimVerifier, OutputGate

# -- the old algorithm, verbatim: the reference the new cut points are compared with -------------------------

_OLD_BOUNDARY = re.compile(r"[.!?]+(?:\[\d{1,3}\]|[\"')\]*]|\^\d{1,3})*\s+(?=[\"'(\[*]?[A-Z0-9])")
_OLD_NEWLINES = re.compile(r"\n+")


def _old_split_starts(text: str) -> list[int]:
    """`split_sentences(text)` before the change, as the start offsets of its sentences."""
    starts, start = [], 0

    def append(begin: int, end: int) -> None:
        while begin < end and text[begin].isspace():
            begin += 1
        while end > begin and text[end - 1].isspace():
            end -= 1
        if end > begin:
            starts.append(begin)

    for match in _OLD_BOUNDARY.finditer(text):
        before = text[start:match.start()].rsplit(None, 1)
        last_token = before[-1].strip("\"'([*") if before else ""
        if last_token.casefold() in structure.ABBREVIATIONS or \
                re.fullmatch(r"[A-Z]|([A-Za-z]+\.)+[A-Za-z]*|§+", last_token):
            continue
        append(start, match.start() + len(match.group(0).rstrip()))
        start = match.end()
    append(start, len(text))
    return starts


def _old_complete_end(text: str) -> int | None:
    ends = []
    if newline := _OLD_NEWLINES.search(text):
        ends.append(newline.end())
    starts = _old_split_starts(text)
    if len(starts) >= 2:
        ends.append(starts[1])
    return min(ends) if ends else None


def _old_gate_cuts(deltas: list[str]) -> list[str]:
    """The pieces the old OutputGate handed to `_gate`, fed delta by delta as the serving loop does."""
    buffer, pieces = "", []
    for delta in deltas:
        buffer += delta
        if _old_complete_end(buffer) is not None:
            while (end := _old_complete_end(buffer)) is not None:
                pieces.append(buffer[:end])
                buffer = buffer[end:]
    if buffer:
        pieces.append(buffer)
    return pieces


class _RecordingGate(OutputGate):
    def __init__(self) -> None:
        super().__init__(NoClaimVerifier(), domain=None, prompt=None, pii_action="allow")
        self.pieces: list[str] = []

    def _gate(self, sentence: str) -> str:
        self.pieces.append(sentence)
        return sentence


def _new_gate_cuts(deltas: list[str]) -> list[str]:
    gate = _RecordingGate()
    for delta in deltas:
        if gate.buffer(delta):
            gate.release_complete()
    gate.finish()
    return gate.pieces


# -- counting what the scanner reads -----------------------------------------------------------------------


class _CountingPattern:
    """Stands in for a compiled pattern; counts the characters each call may read (pos to where it stopped)."""

    def __init__(self, pattern: re.Pattern[str], counter: list[int]) -> None:
        self._pattern, self._counter = pattern, counter

    def finditer(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[str]]:
        stop, reached = min(endpos, len(text)), pos
        try:
            for match in self._pattern.finditer(text, pos, stop):
                reached = match.end()
                yield match
            reached = stop
        finally:
            self._counter[0] += max(0, reached - pos)

    def _once(self, method: str, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        stop = min(endpos, len(text))
        match = getattr(self._pattern, method)(text, pos, stop)
        self._counter[0] += max(0, (match.end() if match else stop) - pos)
        return match

    def search(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self._once("search", text, pos, endpos)

    def match(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self._once("match", text, pos, endpos)

    def fullmatch(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self._once("fullmatch", text, pos, endpos)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pattern, name)


@pytest.fixture
def scanned(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Characters read by every sentence-boundary and newline scan the gate makes (old code or new)."""
    counter = [0]
    targets = [(structure, "_BOUNDARY"), (gate_module, "_NEWLINES")]
    cutter = sys.modules.get("auditor.gate.sentence_cut")
    if cutter is not None:
        targets += [(cutter, name) for name in ("SENTENCE_BOUNDARY", "_NEWLINES", "_CAPITAL_AFTER_SPACE",
                                                "_OPEN_BOUNDARY")]
    for module, name in targets:
        if isinstance(getattr(module, name, None), re.Pattern):
            monkeypatch.setattr(module, name, _CountingPattern(getattr(module, name), counter))
    return counter


SENTENCES = ["Metformin is a first-line treatment for type 2 diabetes.", "It lowers glucose!",
             "See Miranda v. Arizona, 384 U.S. 436 (1966).", "Is the dose 2,550 mg/day?",
             "The label says so.[1]", "Dr. Smith agreed.\n", "\"Quoted,\" he said. "]


def _answer(size: int) -> str:
    rng, parts, total = random.Random(size), [], 0
    while total < size:
        parts.append(rng.choice(SENTENCES))
        total += len(parts[-1]) + 1
    return " ".join(parts)[:size]


def _release_all_at_once(text: str) -> None:
    gate = _RecordingGate()
    if gate.buffer(text):
        gate.release_complete()
    gate.finish()


def _stream(text: str, step: int = 4) -> None:
    gate = _RecordingGate()
    for i in range(0, len(text), step):
        if gate.buffer(text[i:i + step]):
            gate.release_complete()
    gate.finish()


@pytest.mark.parametrize("size", [16_000, 64_000])
def test_an_answer_handed_over_at_once_is_scanned_a_bounded_number_of_times(scanned: list[int], size: int) -> None:
    text = _answer(size)
    _release_all_at_once(text)
    assert scanned[0] <= 6 * len(text), f"{scanned[0]:,} characters scanned for a {len(text):,}-character answer"


def test_release_cost_doubles_when_the_answer_doubles(scanned: list[int]) -> None:
    costs = []
    for size in (32_000, 64_000, 128_000):
        scanned[0] = 0
        _release_all_at_once(_answer(size))
        costs.append(scanned[0])
    ratios = [later / earlier for earlier, later in zip(costs, costs[1:], strict=False)]
    assert all(ratio < 2.5 for ratio in ratios), f"scan cost {costs}: ratios {ratios} (quadratic is ~4)"


@pytest.mark.parametrize("text", [
    _answer(48_000),                                          # ordinary prose, streamed
    "the answer goes on and on without a capital after a stop. " * 800,   # one long unfinished sentence
    "Aaa Bbb Ccc Ddd " * 3000,                                # capitals, but no sentence end
    "See v. Arizona v. Ohio v. Texas v. Utah " * 1000,         # boundaries rejected as abbreviations
    "Wow" + "!" * 40_000 + " ok",                              # one long run of marks
    "Stop." + " " * 40_000 + "x",                              # one long run of spaces after a stop
    "Note." + "[1]" * 12_000 + " Next",                         # footnote markers piling up after a stop
], ids=["prose", "no-capital", "no-stop", "abbreviations", "marks", "spaces", "footnotes"])
def test_a_streamed_answer_is_scanned_a_bounded_number_of_times(scanned: list[int], text: str) -> None:
    _stream(text)
    assert scanned[0] <= 8 * len(text), f"{scanned[0]:,} characters scanned for a {len(text):,}-character stream"


def test_the_validators_splitter_reads_a_long_run_of_marks_in_linear_time() -> None:
    """The old boundary pattern tried every start in a run of . ! ? not followed by a capital, each to the run's
    end ("!" * 8000 took 2 s, "!" * 20000 about 14 s)."""
    started = time.process_time()
    sentences = structure.split_sentences("Hi" + "!" * 20_000 + " then" + "?" * 20_000 + " Yes")
    assert time.process_time() - started < 2.0
    assert [(s.text[:5], len(s.text)) for s in sentences] == [("Hi!!!", 40_007), ("Yes", 3)]


# -- the cut points do not move ---------------------------------------------------------------------------

_PIECES = ["A", "b", "v", "U.S", "Dr", "no", "1", "12", " ", "  ", "\n", "\n\n", ".", "!", "?", "...", "\"", "'",
           "(", ")", "[", "]", "[1]", "^2", "*", "§", "\t", "x", "Yes", "e.g", "\u00a0", "Ω"]


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 60)))


def _random_deltas(rng: random.Random, text: str) -> list[str]:
    deltas, i = [], 0
    while i < len(text):
        step = rng.choice([1, 1, 2, 3, 5, 8, 40])
        deltas.append(text[i:i + step])
        i += step
    return deltas


def test_the_splitter_finds_the_same_sentences_as_before() -> None:
    rng = random.Random(43)
    for _ in range(20_000):
        text = _random_text(rng)
        assert [s.start for s in structure.split_sentences(text)] == _old_split_starts(text), repr(text)


def test_the_gate_cuts_where_it_did_before_however_the_text_arrives() -> None:
    rng = random.Random(9)
    for _ in range(6_000):
        text = _random_text(rng)
        for deltas in ([text], _random_deltas(rng, text), list(text)):
            assert _new_gate_cuts(deltas) == _old_gate_cuts(deltas), (text, deltas)


def test_the_gate_cuts_real_answers_where_it_did_before() -> None:
    text = _answer(6_000)
    rng = random.Random(1)
    for deltas in ([text], _random_deltas(rng, text), [text[i:i + 4] for i in range(0, len(text), 4)]):
        assert _new_gate_cuts(deltas) == _old_gate_cuts(deltas)
