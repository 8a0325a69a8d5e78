"""Polarity: whether a statement is negated, read the same way for every validator.

NegEx's way (Chapman et al. 2001, as medspaCy's ConText applies it): a negation cue negates the words after it
up to a termination ("but", "however", a semicolon) or a window of a few words; pseudo-negations ("not only",
"no doubt", "not necessarily") negate nothing. Validators ask `negated_before(text, position)` about the words
that carry a claim (a relation phrase, a verb), so "X is not contraindicated with Y" and "X is contraindicated
with Y" are two claims of opposite polarity, whichever validator reads them.
"""

from __future__ import annotations

import re

# cues, longest first where one contains another
_CUE = (r"no longer|not|never|no|none|cannot|can't|isn't|aren't|wasn't|weren't|doesn't|don't|didn't|won't|"
        r"wouldn't|shouldn't|hasn't|haven't|hadn't|neither|nor|without|absence of|free of|lack of|lacks?|"
        r"rather than|instead of|n't")
NEGATION = re.compile(rf"(?:\b(?:{_CUE})\b|n't\b)", re.I)
_PSEUDO = re.compile(r"\b(?:not only|no doubt|not necessarily|no later than|not later than|not less than|"
                     r"not more than|not exceed(?:ing)?|no more than|no less than|no fewer than|not to exceed|"
                     r"nothing but|not just)\b", re.I)
_TERMINATION = re.compile(r"\b(?:but|however|although|though|except|yet|whereas|while|which|that is)\b|[;:.!?]", re.I)
WINDOW_WORDS = 5


def negated_between(text: str, start: int, end: int) -> bool:
    """Whether a negation cue (not a pseudo-negation) stands anywhere in text[start:end]."""
    stretch = _PSEUDO.sub(lambda m: " " * len(m.group(0)), text[start:end])
    return bool(NEGATION.search(stretch))


def negated_before(text: str, position: int, *, floor: int = 0, words: int = WINDOW_WORDS) -> bool:
    """Whether the words right before `position` (at most `words` of them, not before `floor` nor across a
    termination) hold a negation cue: the NegEx pre-negation window."""
    left = text[floor:position]
    stops = list(_TERMINATION.finditer(left))
    if stops:
        left = left[stops[-1].end():]
    window = re.findall(r"\S+", left)[-words:]
    return negated_between(" ".join(window), 0, len(" ".join(window)))
