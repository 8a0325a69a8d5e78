"""Document structure with character offsets: markdown blocks, then segments (the units a claim lives in).

Chatbot answers are prose, markdown lists and tables, and "Label: value" lines. A claim never crosses a
table row, a list item or a line of "Label: value" facts, so each of those is one segment; prose lines
are split into sentences. A segment carries what its structure says about it:

- `label`: the "Label" of a "Label: value" line or list item ("Metformin ER (Glucophage XR): 2,000 mg/day");
- `cells`: a table row's cells, each with the header of its column ("Max daily dose");
- `heading`: the line that introduces a list or table ("Labeled adult maximums (for depression unless noted):").

`clauses(segment)` splits a segment further at clause boundaries ("; ", ", while", ", whereas", ", but",
and ", <subject> is" when a new subject starts), so that a value is never paired with a subject of
another clause ("Sweden uses the krona, ISO code SEK, while Switzerland uses the franc").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Tokens after which a period does not end a sentence (legal and medical writing is full of them).
ABBREVIATIONS = frozenset(
    """v vs u.s e.g i.e etc inc co corp ltd no nos cir supp app fed r civ p evid crim stat dr mr mrs ms st
    jr sr art sec ch cl pl ed eds rev cal n.y s.d.n.y d.d.c f l so s.ct ct pub reg approx al
    jan feb mar apr jun jul aug sep sept oct nov dec fig vol pp u.s.c c.f.r""".split()
)
# a sentence ends at . ! ? (with closing quotes, brackets, emphasis and footnote markers: "esomeprazole.[1] The").
# Only the longest run of marks, closers and spaces can be followed by the capital, so the quantifiers are
# possessive and a match starts only where a run of . ! ? starts: the same matches as the backtracking form
# (tests/security/test_gate_release_cost.py), in time linear in the text ("!" * 8000 took 2 s before).
SENTENCE_BOUNDARY = re.compile(r"(?<![.!?])[.!?]++(?:\[\d{1,3}\]|[\"')\]*]|\^\d{1,3})*+\s++(?=[\"'(\[*]?[A-Z0-9])")
_BOUNDARY = SENTENCE_BOUNDARY
_LIST_MARKER = re.compile(r"^(?P<indent>\s*)(?:[-*•+]|\d{1,2}[.)])\s+")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")
# "Label: value" -- a short label (no sentence inside it) before the first colon of the unit
_LABEL = re.compile(r"^(?P<label>[^:.!?\n]{1,80}?)\s*:\s+(?=\S)")
_EMPHASIS = re.compile(r"^[*_]+|[*_]+$")
_ABBREVIATION_TOKEN = re.compile(r"[A-Z]|([A-Za-z]+\.)+[A-Za-z]*|§+")


@dataclass(frozen=True, slots=True)
class Cell:
    start: int
    end: int
    text: str
    header: str            # the column's header text ("" when the table has none)
    column: int


@dataclass(frozen=True, slots=True)
class Segment:
    """A sentence, list item, table row or line: the text a claim lives in (offsets into the document)."""

    start: int
    end: int
    text: str
    kind: str = "sentence"                  # sentence | item | row | line
    block: int = 0                          # index of its paragraph / list / table
    label: tuple[int, int] | None = None    # span of the "Label" of a "Label: value" unit
    cells: tuple[Cell, ...] = ()
    heading: str = ""                       # intro line of its list/table; for rows also the header row

    def cell_at(self, offset: int) -> Cell | None:
        return next((c for c in self.cells if c.start <= offset <= c.end), None)


# Kept for callers that build plain sentences (the output gate's streaming splitter).
Sentence = Segment


@dataclass(slots=True)
class _Line:
    start: int
    end: int
    text: str


def _lines(text: str) -> list[_Line]:
    out, start = [], 0
    for line in text.split("\n"):
        out.append(_Line(start, start + len(line), line))
        start += len(line) + 1
    return out


def split_sentences(text: str, offset: int = 0) -> list[Segment]:
    """Split prose on sentence-final punctuation, but not after abbreviations, initials or citation tokens."""
    sentences: list[Segment] = []
    start = word_from = 0
    for match in _BOUNDARY.finditer(text):
        if ends_in_abbreviation(text, word_from, match.start()):
            word_from = match.end()
            continue  # "v." / "U.S." / "F.3d." / "J." -- an abbreviation, keep going
        _append(sentences, text, start, match.start() + len(match.group(0).rstrip()), offset)
        start = word_from = match.end()
    _append(sentences, text, start, len(text), offset)
    return sentences


def ends_in_abbreviation(text: str, start: int, end: int) -> bool:
    """Whether the last word of `text[start:end]` (the text before a . ! ?) is an abbreviation or an initial.

    `start` may be the end of the previous boundary match rather than the sentence's start: that match ends in
    whitespace before a non-space, so the last word is the same, and each character is read once."""
    before = text[start:end].rsplit(None, 1)
    last_token = before[-1].strip("\"'([*") if before else ""
    return last_token.casefold() in ABBREVIATIONS or bool(_ABBREVIATION_TOKEN.fullmatch(last_token))


def _append(sentences: list[Segment], text: str, start: int, end: int, offset: int, **extra: object) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        sentences.append(Segment(offset + start, offset + end, text[start:end], **extra))  # type: ignore[arg-type]


@dataclass(slots=True)
class _Builder:
    text: str
    segments: list[Segment] = field(default_factory=list)
    block: int = 0
    heading: str = ""

    def paragraph_line(self, line: _Line) -> None:
        stripped = line.text.strip()
        if not stripped:
            self.block += 1
            if not self.heading.endswith(":"):
                self.heading = ""
            return
        label = _label_span(self.text, line.start, line.end)
        if label is not None:
            # "Metformin: up to 2,550 mg/day", "Court: Supreme Court of New Hampshire": one fact per line
            self._unit(line.start, line.end, "line", label)
            return
        self.heading = ""
        for sentence in split_sentences(line.text, line.start):
            self.segments.append(Segment(sentence.start, sentence.end, sentence.text, "sentence", self.block,
                                         heading=self.heading))
        if stripped.endswith(":"):
            self.heading = stripped      # introduces the list or table that follows

    def list_item(self, line: _Line, marker_end: int) -> None:
        start = line.start + marker_end
        label = _label_span(self.text, start, line.end)
        self._unit(start, line.end, "item", label)

    def _unit(self, start: int, end: int, kind: str, label: tuple[int, int] | None) -> None:
        """A list item or a "Label: value" line: one segment; its sentences beyond the first are their own."""
        body = self.text[start:end]
        sentences = split_sentences(body, start)
        if not sentences:
            return
        first = sentences[0]
        if label is not None and label[1] > first.end:
            label = None
        self.segments.append(Segment(first.start, first.end, first.text, kind, self.block, label, heading=self.heading))
        for sentence in sentences[1:]:
            self.segments.append(Segment(sentence.start, sentence.end, sentence.text, "sentence", self.block,
                                         heading=self.heading))

    def table(self, rows: list[_Line]) -> None:
        header_cells = _cells(self.text, rows[0])
        has_header = len(rows) > 1 and bool(_TABLE_SEPARATOR.match(rows[1].text))
        headers = [self.text[s:e] for s, e in header_cells] if has_header else []
        body = rows[2:] if has_header else rows
        heading = " | ".join(h for h in [self.heading, *headers] if h)
        for row in body:
            if _TABLE_SEPARATOR.match(row.text):
                continue
            spans = _cells(self.text, row)
            cells = tuple(Cell(s, e, self.text[s:e], headers[i] if i < len(headers) else "", i)
                          for i, (s, e) in enumerate(spans))
            if not cells:
                continue
            start, end = cells[0].start, cells[-1].end
            self.segments.append(Segment(start, end, self.text[start:end], "row", self.block, cells=cells,
                                         heading=heading))
        self.block += 1
        self.heading = ""


def _label_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The "Label" of "Label: value" between start and end (emphasis marks stripped), if any."""
    body = text[start:end]
    match = _LABEL.match(body)
    if not match or re.search(r"https?$", match.group("label")):
        return None
    raw = match.group("label")
    inner = _EMPHASIS.sub("", raw.strip())
    if not inner:
        return None
    at = start + body.index(inner)
    return at, at + len(inner)


def _cells(text: str, row: _Line) -> list[tuple[int, int]]:
    """Spans of a table row's cells, trimmed of spaces and emphasis marks."""
    spans = []
    pipes = [row.start + m.start() for m in re.finditer(r"\|", row.text)]
    if not pipes:
        return []
    bounds = pipes if row.text.strip().startswith("|") else [row.start - 1, *pipes]
    if not row.text.strip().endswith("|"):
        bounds.append(row.end)
    for left, right in zip(bounds, bounds[1:], strict=False):
        start, end = left + 1, right
        while start < end and (text[start].isspace() or text[start] in "*_"):
            start += 1
        while end > start and (text[end - 1].isspace() or text[end - 1] in "*_"):
            end -= 1
        if end > start:
            spans.append((start, end))
    return spans


def segment(text: str) -> list[Segment]:
    """The segments of `text` in document order."""
    builder = _Builder(text)
    lines = _lines(text)
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.text.lstrip().startswith("|"):
            rows = []
            while index < len(lines) and lines[index].text.lstrip().startswith("|"):
                rows.append(lines[index])
                index += 1
            builder.table(rows)
            continue
        marker = _LIST_MARKER.match(line.text)
        if marker:
            builder.list_item(line, marker.end())
        else:
            builder.paragraph_line(line)
        index += 1
    return builder.segments


# -- clauses -------------------------------------------------------------------------------------------
# A clause boundary: a semicolon; a contrastive conjunction; or ", (and) <a few words> is/are/has ..." when
# a new subject starts its own predicate ("Mail fraud is § 1341, wire fraud is § 1343").
_CLAUSE_BREAK = re.compile(
    r";\s+|\s*,?\s+(?:while(?!\s+(?:you|you're|taking|on|being|using|he|she|they|it|pregnant|breastfeeding)\b)|"
    r"whereas|but|although|though|however|whilst)\s+(?!also\b)"
    r"|,\s+(?:and\s+|or\s+)?(?=(?:[\w'’.()-]+\s+){1,5}?(?:(?:is|are|was|were|has|have|had|does|do|did|can|could|"
    r"should|would|will|must)(?:n't)?|uses|use|caps|goes|targets|covers|sets|requires|applies|gives)\b)",
    re.I,
)


_HAS_VERB = re.compile(r"\b(?:is|are|was|were|has|have|had|uses|use|used|can|may|must|should|will|would|does|do|did|"
                       r"caps|goes|covers|sets|requires|applies|gives|held|holds|decided|takes?|costs?)\b|'s\b", re.I)


def clauses(seg: Segment) -> list[tuple[int, int]]:
    """Document-offset spans of the clauses of a segment (the whole segment when it has none)."""
    if seg.kind == "row":
        return [(c.start, c.end) for c in seg.cells] or [(seg.start, seg.end)]
    bounds = [seg.start]
    for match in _CLAUSE_BREAK.finditer(seg.text):
        if _inside_parentheses(seg.text, match.start()):
            continue
        if re.fullmatch(r",\s+", match.group(0)) \
                and not _HAS_VERB.search(seg.text[bounds[-1] - seg.start:match.start()]):
            continue    # "For patients over 60, the maximum is ...": a leading phrase, not a clause of its own
        # ", and <subject> is ...": a coordinated clause follows whatever verb the first one has ("courts set
        # aside X under § 553, and rulemaking is in § 706")
        bounds.append(seg.start + match.start())
    bounds.append(seg.end)
    out = []
    for left, right in zip(bounds, bounds[1:], strict=False):
        if right > left:
            out.append((left, right))
    return out or [(seg.start, seg.end)]


def _inside_parentheses(text: str, position: int) -> bool:
    return text.count("(", 0, position) > text.count(")", 0, position)
