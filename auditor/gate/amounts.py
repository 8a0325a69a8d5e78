"""Reading a tool-call argument as an amount of money, the way a lenient tool downstream might.

A model (or whoever forces the call) writes an amount many ways: 50000, "50,000", "$50,000", "50000 USD",
"USD 50,000.00", "50 000" (with a space, a no-break or a thin space between the thousands), "５００００"
(full-width digits), "50k", "1.5m", "5e4", "50.000,00". A threshold that reads only some of them lets the
others through, so this module reads the common forms, and says "cannot read" (None) for everything else:
the policy then counts the value as above any threshold (fail closed).

Where a separator is ambiguous ("50.000" is fifty in one locale and fifty thousand in another) the larger
reading is taken, again so that an amount is never under-read.
"""

from __future__ import annotations

import math
import re
import unicodedata
from functools import lru_cache
from typing import Any

_MULTIPLIERS = {"k": 1e3, "thousand": 1e3, "m": 1e6, "mm": 1e6, "mn": 1e6, "mio": 1e6, "million": 1e6,
                "b": 1e9, "bn": 1e9, "billion": 1e9, "t": 1e12, "tn": 1e12, "trillion": 1e12}
_CURRENCY_WORDS = frozenset({"dollar", "dollars", "euro", "euros", "pound", "pounds", "yen", "franc", "francs"})
_SEPARATORS = "'_ \u2019"     # thousands separators besides "." and "," (after NFKC, every space is " ")
_AMOUNT = re.compile(
    r"(?P<before>[a-z]+)?\s*(?P<sign>[-+])?\s*"
    r"(?P<number>\d(?:[\d.,'_ \u2019]*\d)?|\.\d+)(?:e(?P<exponent>[-+]?\d+))?\s*"
    r"(?P<word>[a-z]+)?\s*(?P<after>[a-z]+)?")


def amount_of(value: Any) -> float | None:
    """The value as a number (its magnitude: "-50,000" moves 50,000 too), or None when it cannot be read as
    one: null, true/false, an object, or a string in no form this module knows."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return _magnitude(float(value))
    if isinstance(value, str):
        return _parse(value)
    return None


def _magnitude(number: float) -> float:
    return math.inf if math.isnan(number) else abs(number)   # "nan" must not compare its way past a threshold


def _parse(text: str) -> float | None:
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cf", "Sc")).casefold()
    text = text.replace("\u2212", "-").strip()
    if text.lstrip("+-") in ("nan", "inf", "infinity"):
        return math.inf
    match = _AMOUNT.fullmatch(text)
    if match is None:
        return None
    before, word, after = match["before"], match["word"], match["after"]
    multiplier = 1.0
    if word is not None and word in _MULTIPLIERS:
        multiplier, word = _MULTIPLIERS[word], after
    elif after is not None:
        return None
    if not all(part is None or _is_currency(part) for part in (before, word)):
        return None
    readings = _readings(match["number"])
    if not readings:
        return None
    exponent = int(match["exponent"]) if match["exponent"] else 0
    try:
        largest = max(readings) * multiplier * 10.0 ** exponent
    except OverflowError:
        return math.inf
    return _magnitude(largest)


def _readings(number: str) -> list[float]:
    """Every plausible value of the digits: "." or "," as the decimal point, the other as a thousands
    separator; spaces, apostrophes and underscores always thousands separators."""
    plain = number.translate({ord(c): None for c in _SEPARATORS})
    candidates = {plain.replace(",", "")}                        # 50,000.00  /  9.99
    if "," in plain:
        candidates.add(plain.replace(".", "").replace(",", ".", 1) if plain.count(",") == 1 else "")  # 50.000,00
    if plain.count(".") > 1 or re.fullmatch(r"\d{1,3}\.\d{3}", plain.replace(",", "")):
        candidates.add(plain.replace(".", ""))                   # 50.000.000  /  50.000
    readings = []
    for candidate in candidates:
        try:
            readings.append(float(candidate))
        except ValueError:
            continue
    return readings


def _is_currency(word: str) -> bool:
    return word in _CURRENCY_WORDS or word.upper() in _iso_currency_codes()


@lru_cache(maxsize=1)
def _iso_currency_codes() -> frozenset[str]:
    import pycountry  # ISO 4217, already a dependency; loaded by the first amount written with a code

    return frozenset(currency.alpha_3 for currency in pycountry.currencies)
