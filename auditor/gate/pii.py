"""PII detection and redaction before anything is stored.

Detectors (validated, not just pattern-matched, where a checksum exists):
- email addresses (pattern)
- payment card numbers: 13-19 digits, Luhn-valid (python-stdnum)
- IBANs: checksum-valid (schwifty), in any letter case and grouping
- US social security numbers: dashed, spaced or bare nine digits, with the area/group/serial rules
  (python-stdnum `us.ssn`); a bare nine-digit number only next to an SSN cue word, since CUSIPs and
  routing numbers are nine digits too
- phone numbers: `phonenumbers`' matcher (valid numbers only), default region US
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version

import phonenumbers
from schwifty import IBAN
from schwifty.exceptions import SchwiftyException
from stdnum import luhn
from stdnum.us import ssn as us_ssn

_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_CARD = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b", re.IGNORECASE)
# Separators consistent within the number: 123-45-6789, 123 45 6789 or 123456789.
_SSN_CUE = re.compile(r"(?i)\b(?:ssn|ss#|social[ -]security|soc\.? ?sec|taxpayer id|tin)\b")
_SSN = re.compile(r"(?<![\d-])\d{3}([- ]?)\d{2}\1\d{4}(?![\d-])")
DEFAULT_PHONE_REGION = "US"   # how numbers written without a country code are read
_DIGIT = re.compile(r"\d")   # any decimal digit, as phonenumbers reads them (fullwidth, Arabic-Indic, ...)
# Where one number's digits can be: digits joined by at most four of the separators phonenumbers' matcher reads
# between them (its candidate pattern's; where a version lacks that name, any character but letters and digits,
# and x). "500 mg every 6 hours" is three runs, and so is "title 42, 2019 ed." (a comma separates no number).
_SEPARATORS = getattr(phonenumbers.phonenumberutil, "_VALID_PUNCTUATION", r"\Wxー")
_DIGIT_RUN = re.compile(rf"\d(?:[{_SEPARATORS}]{{0,4}}\d)*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class PiiMatch:
    kind: str      # email | card | iban | ssn | phone
    start: int
    end: int


def find_pii(text: str, *, phone_region: str = DEFAULT_PHONE_REGION) -> list[PiiMatch]:
    """Non-overlapping PII spans, in text order (earlier, longer matches win)."""
    candidates = [PiiMatch("email", m.start(), m.end()) for m in _EMAIL.finditer(text)]
    candidates += [PiiMatch("card", m.start(), m.end()) for m in _CARD.finditer(text) if _is_card(m.group())]
    candidates += [PiiMatch("iban", m.start(), m.end()) for m in _IBAN.finditer(text) if _is_iban(m.group())]
    candidates += [PiiMatch("ssn", m.start(), m.end()) for m in _SSN.finditer(text) if _is_ssn(text, m)]
    if _may_hold_phone_number(text, phone_region):
        candidates += [
            PiiMatch("phone", m.start, m.end)
            for m in phonenumbers.PhoneNumberMatcher(text, phone_region, leniency=phonenumbers.Leniency.VALID)
        ]
    chosen: list[PiiMatch] = []
    for match in sorted(candidates, key=lambda m: (m.start, -(m.end - m.start))):
        if not chosen or match.start >= chosen[-1].end:
            chosen.append(match)
    return chosen


def _may_hold_phone_number(text: str, region: str) -> bool:
    """Whether some run of digits (`_DIGIT_RUN`) holds enough digits for a valid number. The matcher is the
    slowest detector (~60 µs for a sentence with a few figures: it parses every candidate), and where no run
    does, it would find nothing."""
    least = min_phone_digits(region)
    if len(_DIGIT.findall(text)) < least:
        return False
    return any(len(_DIGIT.findall(run.group())) >= least for run in _DIGIT_RUN.finditer(text))


@cache
def min_phone_digits(region: str = DEFAULT_PHONE_REGION) -> int:
    """The fewest digits a number `phonenumbers` accepts as valid can have when written with `region` as the
    default: a national number of that region, or any region's (and the non-geographic codes') with its
    country code, by the library's own metadata (6: +43 / +49 / +98 and four digits). A text without this many
    digits in one run skips the matcher (`_may_hold_phone_number`). The first call reads every region's metadata
    (~30 ms, 1.4 MB): the service makes it after ready (`auditor.app`)."""
    def shortest(metadata: phonenumbers.PhoneMetadata | None) -> int | None:
        lengths = [*(metadata.general_desc.possible_length or ())] if metadata and metadata.general_desc else []
        return min(lengths) if lengths else None

    home = phonenumbers.PhoneMetadata.metadata_for_region(region)
    home_local = list(home.general_desc.possible_length_local_only or ()) if home and home.general_desc else []
    candidates = [n for n in (shortest(home), *home_local) if n]
    regions = [phonenumbers.PhoneMetadata.metadata_for_region(r) for r in phonenumbers.SUPPORTED_REGIONS]
    regions += [phonenumbers.PhoneMetadata.metadata_for_nongeo_region(code)
                for code in phonenumbers.COUNTRY_CODES_FOR_NON_GEO_REGIONS]
    for metadata in regions:
        national = shortest(metadata)
        if national is not None:
            candidates.append(len(str(metadata.country_code)) + national)
    return min(candidates, default=1)


@cache
def detector_versions() -> dict[str, str]:
    """The packages whose rules decide what counts as PII, for the audit record."""
    return {name: version(name) for name in ("phonenumbers", "python-stdnum", "schwifty")}


def redact_pii(text: str, matches: list[PiiMatch] | None = None) -> tuple[str, list[PiiMatch]]:
    """Replace each PII span by `[KIND]`, e.g. `[EMAIL]`."""
    matches = find_pii(text) if matches is None else matches
    pieces, cursor = [], 0
    for match in matches:
        pieces += [text[cursor:match.start], f"[{match.kind.upper()}]"]
        cursor = match.end
    pieces.append(text[cursor:])
    return "".join(pieces), matches


def _is_card(candidate: str) -> bool:
    digits = re.sub(r"\D", "", candidate)
    return 13 <= len(digits) <= 19 and luhn.is_valid(digits)


def _is_ssn(text: str, match: re.Match[str]) -> bool:
    if not us_ssn.is_valid(re.sub(r"\D", "", match.group())):
        return False
    separated = bool(match.group(1))
    return separated or bool(_SSN_CUE.search(text[max(0, match.start() - 40):match.start()]))


def _is_iban(candidate: str) -> bool:
    try:
        IBAN(candidate.upper())
    except SchwiftyException:
        return False
    return True
