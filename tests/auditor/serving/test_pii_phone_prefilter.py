"""find_pii skips the phone matcher on texts where no run of digits holds enough digits for any valid number, and
finds exactly what it found without the skip: every region's example numbers in each format, the same numbers cut
short, chat sentences with a few figures, numbers among words and figures, and random digit, punctuation and word
runs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import phonenumbers
import pytest

from auditor.gate import pii
from auditor.gate.pii import find_pii, min_phone_digits

DATA = Path(__file__).resolve().parents[3] / "benchmarks" / "data"
FORMATS = (phonenumbers.PhoneNumberFormat.INTERNATIONAL, phonenumbers.PhoneNumberFormat.E164,
           phonenumbers.PhoneNumberFormat.NATIONAL)


def _example_numbers() -> list[str]:
    texts = []
    for region in sorted(phonenumbers.SUPPORTED_REGIONS):
        for kind in (phonenumbers.PhoneNumberType.FIXED_LINE, phonenumbers.PhoneNumberType.MOBILE):
            number = phonenumbers.example_number_for_type(region, kind)
            if number is not None:
                texts += [phonenumbers.format_number(number, fmt) for fmt in FORMATS]
    for code in phonenumbers.COUNTRY_CODES_FOR_NON_GEO_REGIONS:
        number = phonenumbers.example_number_for_non_geo_entity(code)
        if number is not None:
            texts.append(phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.INTERNATIONAL))
    return texts


def _without_skip(text: str, monkeypatch: pytest.MonkeyPatch) -> list[pii.PiiMatch]:
    with monkeypatch.context() as patched:
        patched.setattr(pii, "min_phone_digits", lambda region: 0)
        return find_pii(text)


def _digits(text: str) -> int:
    return sum(ch.isdecimal() for ch in text)


def test_every_regions_numbers_are_found_as_without_the_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    numbers = _example_numbers()
    assert len(numbers) > 600
    rng = random.Random(3)
    found = 0
    for number in numbers:
        cut = number[: max(1, len(number) - rng.randrange(1, 6))]   # the same number with its last digits gone
        for text in (f"Call {number} today.", f"Call {cut} today.", f"ref {number.replace(' ', '')}"):
            expected = _without_skip(text, monkeypatch)
            assert find_pii(text) == expected, text
            found += any(match.kind == "phone" for match in expected)
            if _digits(text) < min_phone_digits("US"):
                assert not any(match.kind == "phone" for match in expected), text   # the skip is never a miss
    assert found > 500   # the examples are found: the comparison is not between two empty results


def test_chat_sentences_and_random_runs_are_found_as_without_the_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = []
    for name in ("answers_finance", "answers_medical", "answers_legal", "offdomain_chat"):
        for line in (DATA / f"{name}.jsonl").read_text().splitlines()[:60]:
            row = json.loads(line)
            texts += [row.get("prompt") or "", row.get("answer") or ""]
    rng = random.Random(11)
    pieces = ["+", " ", "-", "(", ")", ".", "/", "x", "０", "٣", *"0123456789"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randrange(1, 14))) for _ in range(3000)]
    skipped = 0
    for text in texts:
        assert find_pii(text) == _without_skip(text, monkeypatch), text
        skipped += not pii._may_hold_phone_number(text, "US")
    assert skipped > 1000   # most of them take the short way


SEPARATORS = ["-", " ", ".", "ー", "－", "\u00a0", "\u2010", "~"]   # ones the matcher reads between groups


def _regrouped(digits: list[str], rng: random.Random, *, most: int) -> str:
    """The digits in groups of one to four, joined by one to `most` separators."""
    grouped, rest = "", digits
    while rest:
        size = rng.randrange(1, 5)
        grouped += "".join(rest[:size])
        rest = rest[size:]
        if rest:
            grouped += "".join(rng.choice(SEPARATORS) for _ in range(rng.randrange(1, most + 1)))
    return grouped


def test_numbers_among_words_and_figures_are_found_as_without_the_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(29)
    words = ["Take", "500", "mg", "every", "6", "hours", "call", "on", "ext", "room", "12", "or", "ー", "x", "Tel:"]
    texts = []
    for number in rng.sample(_example_numbers(), 300):
        if not number.startswith("+"):
            continue
        digits = [ch for ch in number if ch.isdecimal()]
        # up to four separators join a run; five or more do not (nor can the matcher read one number there)
        texts += [f"{rng.choice(words)} +{_regrouped(digits, rng, most=1)} {rng.choice(words)}",
                  f"{rng.choice(words)} +{_regrouped(digits, rng, most=4)} {rng.choice(words)}",
                  f"Dose 250 mg; call +{_regrouped(digits, rng, most=6)}.",
                  " ".join(rng.choice(words + ["+" + "".join(digits[:3]), "".join(digits[3:])]) for _ in range(8))]
    found = skipped = 0
    for text in texts:
        expected = _without_skip(text, monkeypatch)
        assert find_pii(text) == expected, text
        found += any(match.kind == "phone" for match in expected)
        skipped += not pii._may_hold_phone_number(text, "US")
    assert found > 100 and skipped > 50   # both sides of the comparison are exercised


def test_every_separator_the_matcher_reads_inside_a_number_joins_a_run() -> None:
    """The skip is safe only while a number's digits stay in one run: whatever character the library's matcher
    reads between the groups of a number it finds, the run takes too."""
    joining = []
    for code in [*range(0x20, 0x3100), *range(0xFE30, 0xFFF0)]:
        sep = chr(code)
        text = f"Call 202{sep}555{sep}0143 now"
        spans = [(m.start, m.end) for m in phonenumbers.PhoneNumberMatcher(text, "US", leniency=phonenumbers.Leniency.VALID)]
        if any(start <= 5 and end >= 5 + len(f"202{sep}555{sep}0143") for start, end in spans):
            joining.append(sep)
            assert pii._DIGIT_RUN.fullmatch(f"202{sep}555{sep}0143"), hex(code)
    assert len(joining) > 15   # the probe reaches the library's separators


def test_figures_split_by_words_skip_the_matcher_and_a_number_does_not() -> None:
    for text in ("Take 500 mg every 6 hours, up to 4000 mg a day.", "Section 1983 of title 42, 2019 amendments",
                 "Rates rose 25 bp in 2023 and 50 bp in 2024."):
        assert not pii._may_hold_phone_number(text, "US") and find_pii(text) == [], text
    for text in ("Call (202) 555-0143.", "Call 202 - 555 ー 0143.", "+49 30 901820", "Tel: 202x555x0143"):
        assert pii._may_hold_phone_number(text, "US"), text


def test_the_threshold_comes_from_the_librarys_metadata() -> None:
    assert min_phone_digits("US") == 6   # +43, +49 or +98 and a four-digit national number
    shortest = phonenumbers.parse("+683 4002", None)   # Niue: a valid number of seven digits in all
    assert phonenumbers.is_valid_number(shortest) and min_phone_digits("US") <= 7
    assert find_pii("Niue: +683 4002.") == [pii.PiiMatch("phone", 6, 15)]
