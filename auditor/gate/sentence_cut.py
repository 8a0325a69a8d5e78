"""Where the output gate cuts generated text into sentences, read once from left to right.

The cut points are exactly those of `complete_sentence_end` (the validators' own splitter, run on what is left
after each cut): the first sentence is complete at the end of its newline run, or where the validators'
splitter starts the next sentence. Running that splitter on the whole remaining buffer for every sentence
released, and again on every streamed delta, made the gate's cost quadratic in the answer (56 KB took 45 s
of CPU). Here each character is scanned a bounded number of times:

- a boundary match (`SENTENCE_BOUNDARY`) is final once the capital after it has arrived, and one that was
  rejected (an abbreviation before it) stays rejected, so scanning resumes after it;
- a later delta can complete a boundary only by bringing a capital or digit after whitespace, so a delta
  without one is not scanned for boundaries at all, and only the last run of . ! ? can still become one.
"""

from __future__ import annotations

import re

from rules.extraction.structure import SENTENCE_BOUNDARY, ends_in_abbreviation, split_sentences

_NEWLINES = re.compile(r"\n+")
# what a boundary match needs last: whitespace, then a capital or digit (maybe after an opening quote or bracket)
_CAPITAL_AFTER_SPACE = re.compile(r"\s[\"'(\[*]?[A-Z0-9]")
# a run of . ! ? that may still become a boundary match when more text comes (a prefix of SENTENCE_BOUNDARY)
_OPEN_BOUNDARY = re.compile(r"[.!?]+(?:\[\d{1,3}\]|[\"')\]*]|\^\d{1,3})*(?:\[\d{0,3}|\^|\s+[\"'(\[*]?)?")


def complete_sentence_end(text: str) -> int | None:
    """Where the first sentence of `text` that is known to be complete ends (its trailing whitespace
    included), or None while it may still go on. The definition `SentenceCutter` follows; it reads the
    whole text, so the gate does not call it.

    The validators' own splitter decides, so "Miranda v. Arizona, 384 U.S. 436 (1966)." is gated as
    one sentence: cutting at "v." or "U.S." would hand the validators fragments with no checkable
    citation in them. A sentence counts as complete once the next one has begun, or at a newline.
    """
    ends = []
    if newline := _NEWLINES.search(text):
        ends.append(newline.end())
    sentences = split_sentences(text)
    if len(sentences) >= 2:
        ends.append(sentences[1].start)
    return min(ends) if ends else None


class SentenceCutter:
    """Generated text, and where its next complete sentence ends.

    `append` adds text, `next_end` says where the first complete sentence of the uncut text ends (an offset
    into `text`, None while it may go on), `cut(end)` hands that sentence over. Offsets are into `text`, which
    drops what was cut when `compact` is called.
    """

    def __init__(self) -> None:
        self.text = ""
        self.start = 0                  # where the uncut text begins
        self._newline = -1              # the first "\n" at or after start, once found
        self._newline_from = 0          # no "\n" in [start, _newline_from)
        self._scan_from = 0             # boundary matches before here are known: all were abbreviations
        self._word_from = 0             # where the last word before the next boundary may begin
        self._seen = 0                  # boundaries were scanned for up to here (a new one needs text after it)
        self._answer: tuple[int, int, int | None] | None = None   # (start, len(text), next_end) last computed

    def append(self, delta: str) -> None:
        # With the attribute's reference dropped first, CPython grows the string in place; `self.text += delta`
        # copied the whole text on every delta (a 512 KB sentence in 4-character deltas: 8 s against 0.01 s).
        text, self.text = self.text, ""
        text += delta
        self.text = text

    @property
    def rest(self) -> str:
        return self.text[self.start:]

    def cut(self, end: int) -> str:
        """The text from `start` to `end`; `start` moves there."""
        piece = self.text[self.start:end]
        self.start = self._scan_from = self._word_from = self._seen = end
        self._answer = None
        return piece

    def compact(self) -> None:
        """Drop the text already cut (keeps each append's copy as short as the old buffer was)."""
        shift = self.start
        if shift == 0:
            return
        self.text = self.text[shift:]
        self.start = 0
        self._newline = self._newline - shift if self._newline >= shift else -1
        self._newline_from = max(0, self._newline_from - shift)
        self._scan_from -= shift
        self._word_from -= shift
        self._seen -= shift
        self._answer = None

    def next_end(self) -> int | None:
        """Where `complete_sentence_end(self.rest)` says the first complete sentence ends, as an offset into
        `text`; it reads only text not read before, but for a run of . ! ? that may still end a sentence."""
        key = (self.start, len(self.text))
        if self._answer is not None and self._answer[:2] == key:
            return self._answer[2]
        end = self._find_end()
        self._answer = (*key, end)
        return end

    def _find_end(self) -> int | None:
        text, size = self.text, len(self.text)
        newline_end = self._newline_end()
        if newline_end is None and not _CAPITAL_AFTER_SPACE.search(text, max(self.start, self._seen - 2), size):
            self._seen = size
            return None
        # A boundary match that starts after the newline run cannot end before it; one that starts before it
        # and ends within reads at most two characters past the run.
        endpos = size if newline_end is None else min(size, newline_end + 2)
        for match in SENTENCE_BOUNDARY.finditer(text, self._scan_from, endpos):
            if newline_end is not None and match.start() >= newline_end:
                break
            if not ends_in_abbreviation(text, self._word_from, match.start()):
                return match.end() if newline_end is None else min(match.end(), newline_end)
            self._scan_from = self._word_from = match.end()
        if newline_end is not None:
            return newline_end
        self._seen = size
        self._scan_from = _open_boundary_start(text, self._scan_from, size)
        return None

    def _newline_end(self) -> int | None:
        if self._newline < self.start:
            found = self.text.find("\n", max(self.start, self._newline_from))
            self._newline_from = len(self.text) if found < 0 else found
            self._newline = found
            if found < 0:
                return None
        return _NEWLINES.match(self.text, self._newline).end()


def _open_boundary_start(text: str, start: int, size: int) -> int:
    """Where a boundary match may still begin once more text comes: the start of the last run of . ! ? when
    what follows it could still be the rest of a match, else the end of the text."""
    last = max(text.rfind(".", start, size), text.rfind("!", start, size), text.rfind("?", start, size))
    if last < 0:
        return size
    run_start = last
    while run_start > start and text[run_start - 1] in ".!?":
        run_start -= 1
    return run_start if _OPEN_BOUNDARY.fullmatch(text, run_start, size) else size
