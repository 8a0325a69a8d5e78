"""Numbers written in words, read into digits with a map back to the original offsets.

`numeric_view(text)` returns the text with every run of number words replaced by its digits ("eighty
milligrams" -> "80 milligrams", "seventy-five thousand dollars" -> "75000 dollars", "nineteen sixty-six"
-> "1966", "one and one-half" -> "1.5") and a map from view offsets to text offsets, so the quantity,
money and date finders run once on digits and still report spans in the text the user sees.
Cardinals are read by text2num (measured against number-parser and quantulum3: same readings on our
phrases, 90x and 150x faster); years said as two pairs and simple fractions are read here, since
text2num reads "nineteen sixty-six" as two numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from text_to_num import text2num

_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ("hundred", "thousand", "million", "billion")
_WORD = r"(?:" + "|".join(sorted([*_UNITS, *_TENS], key=len, reverse=True)) + r")(?:-(?:" + "|".join(_UNITS[1:10]) + r"))?"
_SCALE = r"(?:" + "|".join(_SCALES) + r")"
# a run: number words joined by spaces, hyphens or "and" inside ("one hundred and twenty")
_AFTER_SCALE = "".join(f"(?<={s})" if i == 0 else f"|(?<={s})" for i, s in enumerate(_SCALES))
_RUN = re.compile(rf"\b(?:{_WORD}|{_SCALE})(?:(?:(?:{_AFTER_SCALE})\s+and\s+|[\s-]+)(?:{_WORD}|{_SCALE}))*\b", re.I)
_TEENS_OR_TWENTY = {w: i for i, w in enumerate(_UNITS) if i >= 11} | {"twenty": 20}
_FRACTION = re.compile(r"\b(?P<whole>[a-z]+)\s+and\s+(?:a|one)[\s-](?P<part>half|quarter|third)\b", re.I)
_FRACTIONS = {"half": 0.5, "quarter": 0.25, "third": 1 / 3}
_DIGIT_WORDS = {w: i for i, w in enumerate(_UNITS[:10])} | {"oh": 0, "o": 0}
# "one point five", "zero point two five", "point five": a decimal said digit by digit after "point"
_DECIMAL = re.compile(rf"\b(?:(?P<whole>{_WORD}(?:[\s-]+(?:{_WORD}|{_SCALE}))*)\s+)?point"
                      rf"(?P<digits>(?:\s+(?:{'|'.join(_DIGIT_WORDS)})\b)+)", re.I)
# "half a gram", "a quarter of a million", "half a million", "a third of a"
_PART_OF = re.compile(r"\b(?:(?:a|one)\s+)?(?P<part>half|quarter|third)\s+(?:of\s+)?(?:a|an)\b"
                      r"(?:\s+(?P<scale>hundred|thousand|million|billion)\b)?", re.I)
_A_SCALE = re.compile(r"\b(?<!-)a\s+(?P<scale>hundred|thousand|million|billion)\b", re.I)
_SCALE_VALUES = {"hundred": 1e2, "thousand": 1e3, "million": 1e6, "billion": 1e9}
# "fifteen grand", "10 grand": thousands of dollars, said colloquially (US usage)
_GRAND = re.compile(r"(?P<number>\b\d+(?:\.\d+)?|(?:\b[a-z-]+\s+){0,3}[a-z-]+)\s+grand\b", re.I)


@dataclass(frozen=True, slots=True)
class NumberWords:
    start: int
    end: int
    value: float
    is_year: bool = False
    prefix: str = ""          # written before the digits in the view ("$" for "fifteen grand")


def _value(run: str) -> float | None:
    words = re.split(r"[\s-]+", run.casefold().replace(" and ", " "))
    # "nineteen sixty-six", "twenty twenty-two": a year said as two pairs
    if len(words) in (2, 3) and words[0] in _TEENS_OR_TWENTY and words[1] in _TENS + _UNITS[10:]:
        tail = " ".join(words[1:])
        try:
            return _TEENS_OR_TWENTY[words[0]] * 100 + text2num(tail, "en")
        except ValueError:
            return None
    try:
        return float(text2num(" ".join(words), "en"))
    except ValueError:
        return None


def find_number_words(text: str) -> list[NumberWords]:
    """Runs of number words with their values (years said in pairs flagged)."""
    out: list[NumberWords] = []
    taken: list[tuple[int, int]] = []

    def free(span: tuple[int, int]) -> bool:
        return not any(s < span[1] and span[0] < e for s, e in taken)

    folded = text.casefold()
    # each pattern runs only where its key word occurs: most segments hold none, and a scan costs more than a test
    decimals = _DECIMAL.finditer(text) if "point" in folded else ()
    grands = _GRAND.finditer(text) if "grand" in folded else ()
    parts = _PART_OF.finditer(text) if any(w in folded for w in ("half", "quarter", "third")) else ()
    scales = _A_SCALE.finditer(text) if any(w in folded for w in _SCALE_VALUES) else ()
    for match in decimals:
        whole = _value(match.group("whole")) if match.group("whole") else 0.0
        if whole is None:
            continue
        digits = "".join(str(_DIGIT_WORDS[d.casefold()]) for d in match.group("digits").split())
        out.append(NumberWords(match.start(), match.end(), float(f"{int(whole)}.{digits}")))
        taken.append(match.span())
    for match in grands:
        words = match.group("number")
        # the number words right before "grand" (the lazy group may have taken words that are not numbers)
        tail = re.search(rf"(?:\d+(?:\.\d+)?|(?:{_WORD}|{_SCALE})(?:[\s-]+(?:{_WORD}|{_SCALE}))*)$", words, re.I)
        value = None if tail is None else (float(tail.group(0)) if tail.group(0)[0].isdigit() else _value(tail.group(0)))
        if value is not None:
            start = match.start("number") + tail.start()
            out.append(NumberWords(start, match.end(), value * 1000, prefix="$"))
            taken.append((start, match.end()))
    for match in parts:
        if not free(match.span()):
            continue
        part = _FRACTIONS[match.group("part").casefold()]
        scale = match.group("scale")
        out.append(NumberWords(match.start(), match.end(), part * (_SCALE_VALUES[scale.casefold()] if scale else 1.0)))
        taken.append(match.span())
    for match in scales:
        if free(match.span()):
            out.append(NumberWords(match.start(), match.end(), _SCALE_VALUES[match.group("scale").casefold()]))
            taken.append(match.span())
    for match in _FRACTION.finditer(text):
        if not free(match.span()):
            continue
        whole = _value(match.group("whole"))
        if whole is not None:
            out.append(NumberWords(match.start(), match.end(), whole + _FRACTIONS[match.group("part").casefold()]))
            taken.append(match.span())
    for match in _RUN.finditer(text):
        if any(s < match.end() and match.start() < e for s, e in taken):
            continue
        run = match.group(0)
        if re.fullmatch(r"(?:hundred|thousand|million|billion)(?:[\s-]+(?:hundred|thousand|million|billion))*", run, re.I):
            continue     # "20 million", "$3 billion": a scale after digits is read by the money and number finders
        value = _value(run)
        if value is None:
            continue
        words = re.split(r"[\s-]+", run.casefold())
        is_year = len(words) in (2, 3) and words[0] in _TEENS_OR_TWENTY and words[1] not in _SCALES and value >= 1100
        out.append(NumberWords(match.start(), match.end(), value, is_year))
    return sorted(out, key=lambda n: n.start)


def _digits(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


@dataclass(frozen=True, slots=True)
class NumericView:
    """`text` with number words as digits, and the map of each view character back to the original text."""

    text: str
    _starts: tuple[int, ...]     # view index -> original start of that character
    _ends: tuple[int, ...]       # view index -> original end of that character

    def span(self, start: int, end: int) -> tuple[int, int]:
        """Original span of the view span [start, end)."""
        if not self._starts:
            return start, end
        if end <= start:
            at = self._starts[start] if start < len(self._starts) else self._ends[-1]
            return at, at
        return self._starts[start], self._ends[end - 1]


@lru_cache(maxsize=2048)
def numeric_view(text: str) -> NumericView:
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    cursor = 0
    for number in find_number_words(text):
        pieces.append(text[cursor:number.start])
        starts.extend(range(cursor, number.start))
        ends.extend(range(cursor + 1, number.start + 1))
        digits = number.prefix + _digits(number.value)
        pieces.append(digits)
        # every digit stands for the whole run of words
        starts.extend([number.start] * len(digits))
        ends.extend([number.end] * len(digits))
        cursor = number.end
    pieces.append(text[cursor:])
    starts.extend(range(cursor, len(text)))
    ends.extend(range(cursor + 1, len(text) + 1))
    return NumericView("".join(pieces), tuple(starts), tuple(ends))
