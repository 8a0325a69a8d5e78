"""find_pii skips the phone matcher on texts with too few digits for any valid number, and finds exactly what
it found without the skip: every region's example numbers in each format, the same numbers cut short, chat
sentences with a few figures, and random digit and punctuation runs."""

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
        skipped += _digits(text) < min_phone_digits("US")
    assert skipped > 1000   # most of them take the short way


def test_the_threshold_comes_from_the_librarys_metadata() -> None:
    assert min_phone_digits("US") == 6   # +43, +49 or +98 and a four-digit national number
    shortest = phonenumbers.parse("+683 4002", None)   # Niue: a valid number of seven digits in all
    assert phonenumbers.is_valid_number(shortest) and min_phone_digits("US") <= 7
    assert find_pii("Niue: +683 4002.") == [pii.PiiMatch("phone", 6, 15)]
