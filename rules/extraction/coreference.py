"""Which entity a value is about: the nearest compatible antecedent, structure first.

A value ("40 mg", "E11.9", "decided in 2016", "ISO code SEK") is paired with a mention of the entity
types the validator asks for, searching in this order and taking the first hit:

1. its own clause: the nearest mention before the value, else the nearest after it ("40 mg is the
   maximum for Lexapro");
2. its structure: the "Label" of a "Label: value" line or list item, else the other cells of its table
   row (the row's first cell first);
3. earlier clauses of its segment, nearest first ("Colchicine 0.6 mg twice a day works out to 1.2 mg
   daily, which is ...");
4. earlier segments, nearest first, skipping sibling list items and table rows (the subject of one
   bullet is never the subject of the next); in a segment, its subject (a mention among its first
   words) before its last mention; this is how "it", "the drug", "this case" and elided subjects
   resolve ("Tylenol (acetaminophen) is ... Adults can take up to 4 g");
5. the question the answer replies to ("what's the alpha-3 code for switzerland" -> "It's CHE").

`accept` filters mentions before the search (e.g. only drugs the KG has a label for), so an ordinary
word or an unlabelled substance never displaces the real subject.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rules.claims import Document
    from rules.mentions import Mention


# a mention within this many words of a sentence's start is its subject
SUBJECT_WORDS = 3
_PRONOUN_START = re.compile(r"^\W*(?:it|it's|its|they|this drug|the drug|this medication|this case|the case|"
                            r"this code|that code|this one)\b", re.I)


def find_antecedent(doc: Document, position: int, types: Collection[str], *,
                    accept: Callable[[Mention], bool] | None = None) -> Mention | None:
    pool = [m for m in doc.mentions(types) if accept is None or accept(m)]
    seg = doc.segment_of(position)
    clause = doc.clause_of(position)
    # 1. the value's own clause
    before = [m for m in pool if clause[0] <= m.start and m.end <= position]
    if before:
        return before[-1]
    after = [m for m in pool if position <= m.start and m.end <= clause[1]]
    if after:
        return after[0]
    # 2. its structure: the label, or the other cells of its row
    if seg.label is not None:
        labelled = [m for m in pool if seg.label[0] <= m.start and m.end <= seg.label[1]]
        if labelled:
            return labelled[-1]
    if seg.cells:
        own = seg.cell_at(position)
        for cell in sorted(seg.cells, key=lambda c: (c is own, c.column)):
            if cell is own:
                continue
            in_cell = [m for m in pool if cell.start <= m.start and m.end <= cell.end]
            if in_cell:
                return in_cell[0]
    # 3. earlier clauses of the segment
    earlier = [m for m in pool if seg.start <= m.start and m.end <= clause[0]]
    if earlier:
        return earlier[-1]
    # 4. earlier segments, skipping sibling items and rows
    for previous in reversed([s for s in doc.segments if s.end <= seg.start]):
        if _siblings(previous, seg):
            continue
        found = [m for m in pool if previous.start <= m.start and m.end <= previous.end]
        if found and _PRONOUN_START.match(previous.text) and found[0].start - previous.start > 12:
            continue    # "It must not be combined with SSRIs ...": that sentence is about an earlier subject
        if found:
            # the subject of the sentence before ("Metronidazole doesn't ... with warfarin. Avoid alcohol while
            # taking it": it = metronidazole), else its last mention
            subject = found[0]
            if len(doc.text[previous.start:subject.start].split()) <= SUBJECT_WORDS:
                return subject
            return found[-1]
    # 5. the question
    asked = [m for m in doc.prompt_mentions(types) if accept is None or accept(m)]
    return asked[-1] if asked else None


def _siblings(a: object, b: object) -> bool:
    return (getattr(a, "kind", "") in ("item", "row") and getattr(b, "kind", "") in ("item", "row")
            and getattr(a, "block", -1) == getattr(b, "block", -2))
