"""A Hypothesis fuzz pass over every KG import format: each fixture file, mutated (hostile bytes and text spliced
in, a byte replaced, the file cut short, a slice repeated), either imports or is rejected with the importer's own
error (one line naming the file, line and field); never another exception, which the CLI would print as a
traceback and the API as a 500."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_graphs import KnowledgeGraph, load_kg
from knowledge_graphs.imports import ImportFileError, ImportFormatError, ImportStamp, parse_file

TESTS = Path(__file__).parents[1]
PUBLIC = TESTS / "fixtures" / "imports"
OWN = TESTS / "knowledge_graphs" / "imports" / "fixtures"
FILES = [
    ("ofac-sdn", "finance", OWN / "sdn.csv"), ("formulary", "medical", OWN / "formulary.csv"),
    ("cases", "legal", OWN / "scdb_cases.csv"), ("triples", "finance", OWN / "triples.jsonl"),
    ("gleif-lei", "finance", PUBLIC / "gleif_lei.csv"), ("sec-tickers", "finance", PUBLIC / "company_tickers_exchange.json"),
    ("iso4217-xml", "finance", PUBLIC / "iso4217_list_one.xml"), ("ecfr-xml", "finance", PUBLIC / "ecfr_title31_part1010.xml"),
    ("uslm-xml", "legal", PUBLIC / "uslm_title42_excerpt.xml"),
    ("courtlistener-citations", "legal", PUBLIC / "courtlistener_citations.csv"),
    ("eurlex", "legal", PUBLIC / "eurlex_export.csv"), ("eurlex", "legal", PUBLIC / "eurlex_search.xml"),
    ("openfda-label", "medical", PUBLIC / "openfda_drug_label.json"), ("rxnorm-rrf", "medical", PUBLIC / "RXNCONSO.RRF"),
]
HOSTILE = [b"\x00", b"\xff\xfe", b"\xc3", "\u202e".encode(), b"\x1b[2J", b"\x07", b'"', b",,,,", b"|", b"\r",
           b"\n", b"<", b"]]>", b"&bogus;", b"<!DOCTYPE x [<!ENTITY a 'aaaa'>]>", b"{", b"}", b"[", b"9" * 400,
           b"-1e999", b"NaN", "\ud7ff\ue000\U0010ffff".encode(), "𝕏".encode() * 50]


@cache
def _kg(domain: str) -> KnowledgeGraph:
    return load_kg(domain)


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    at = draw(st.integers(0, len(data)))
    how = draw(st.sampled_from(["insert", "replace", "cut", "repeat"]))
    if how == "insert":
        piece = draw(st.one_of(st.sampled_from(HOSTILE), st.binary(max_size=8), st.text(max_size=8).map(str.encode)))
        return data[:at] + piece + data[at:]
    if how == "replace" and at < len(data):
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    if how == "repeat":
        end = draw(st.integers(at, min(len(data), at + 200)))
        return data[:end] + data[at:end] + data[end:]
    return data[:at]


@pytest.mark.parametrize(("fmt", "domain", "path"), FILES, ids=[f"{f}-{p.name}" for f, _, p in FILES])
def test_a_mangled_import_file_is_imported_or_rejected_in_one_line(fmt: str, domain: str, path: Path) -> None:
    original = path.read_bytes()
    kg = _kg(domain)

    @settings(max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(data=mutated(original))
    def attempt(data: bytes) -> None:
        stamp = ImportStamp(fmt, fmt, path.name, hashlib.sha256(data).hexdigest(), "2026-12-08T10:00:00+00:00",
                            "key:fuzz (acme)", "2026-12-01")
        try:
            parse_file(fmt, data, domain=domain, stamp=stamp, kg=kg)
        except (ImportFileError, ImportFormatError) as exc:
            message = str(exc)
            assert message and "\n" not in message and "\x1b" not in message, message

    attempt()
