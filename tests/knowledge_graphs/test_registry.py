"""load_kg: caching, version stability, clear errors for unknown domains and bad curated data."""

import shutil
from pathlib import Path

import pytest

from knowledge_graphs import DOMAINS, CuratedDataError, UnknownDomainError, build_kg, load_kg
from knowledge_graphs.curated import DATA_DIR, load_generic, load_manifest


def test_domains_are_the_three_promised():
    assert DOMAINS == ("finance", "legal", "medical")


def test_unknown_domain_is_a_value_error_naming_the_known_ones():
    with pytest.raises(ValueError) as info:
        load_kg("astrology")
    assert isinstance(info.value, UnknownDomainError)
    for domain in DOMAINS:
        assert domain in str(info.value)


def test_load_kg_is_cached():
    assert load_kg("finance") is load_kg("finance")


def test_same_data_gives_the_same_version():
    assert build_kg("finance").version == load_kg("finance").version
    assert build_kg("legal").version == load_kg("legal").version


@pytest.fixture()
def finance_copy(tmp_path: Path) -> Path:
    shutil.copytree(DATA_DIR / "finance", tmp_path / "finance")
    return tmp_path


def test_changing_one_curated_value_changes_the_version(finance_copy: Path):
    path = finance_copy / "finance" / "regulations.yaml"
    text = path.read_text()
    assert "value: 5000, unit: USD" in text
    path.write_text(text.replace("value: 5000, unit: USD", "value: 5001, unit: USD", 1))
    tweaked = build_kg("finance", finance_copy)
    assert tweaked.version != load_kg("finance").version
    sar = tweaked.facts("regulation:31-cfr-1020-320", "threshold")
    assert 5001 in [f.value for f in sar] and 5000 not in [f.value for f in sar]


def test_bumping_the_manifest_version_changes_the_kg_version(finance_copy: Path):
    path = finance_copy / "finance" / "manifest.yaml"
    manifest = load_manifest("finance", finance_copy)
    path.write_text(path.read_text().replace(f'version: "{manifest.version}"', 'version: "test-bump"'))
    assert build_kg("finance", finance_copy).version != load_kg("finance").version


def test_record_without_as_of_fails_naming_file_and_record(finance_copy: Path):
    path = finance_copy / "finance" / "regulations.yaml"
    text = path.read_text()
    target = 'locator: "31 CFR 1010.311", as_of: 2026-12-02}'
    assert target in text
    path.write_text(text.replace(target, 'locator: "31 CFR 1010.311"}', 1))
    with pytest.raises(CuratedDataError) as info:
        build_kg("finance", finance_copy)
    message = str(info.value)
    assert "regulations.yaml" in message
    assert "regulation:31-cfr-1010-311" in message
    assert "as_of" in message


def test_record_with_unknown_source_fails(tmp_path: Path):
    shutil.copytree(DATA_DIR / "legal", tmp_path / "legal")
    bad = tmp_path / "legal" / "statutes.yaml"
    bad.write_text("entities:\n  - {id: 'statute:x', type: statute, name: X, source: blog, locator: p1, as_of: 2026-01-01}\n")
    with pytest.raises(CuratedDataError, match=r"statutes\.yaml.*statute:x.*unknown source 'blog'"):
        load_generic(bad, load_manifest("legal", tmp_path))


@pytest.mark.parametrize("as_of", ["2026-13-01", "yesterday", "2026/01/01"])
def test_as_of_must_be_an_iso_date(tmp_path: Path, as_of: str):
    shutil.copytree(DATA_DIR / "legal", tmp_path / "legal")
    bad = tmp_path / "legal" / "statutes.yaml"
    bad.write_text(f"entities:\n  - {{id: 'statute:x', type: statute, name: X, source: uscode, locator: p1, as_of: '{as_of}'}}\n")
    with pytest.raises(CuratedDataError, match="ISO date"):
        load_generic(bad, load_manifest("legal", tmp_path))


def test_invalid_yaml_names_the_file(tmp_path: Path):
    shutil.copytree(DATA_DIR / "legal", tmp_path / "legal")
    (tmp_path / "legal" / "cases.yaml").write_text("cases: [unclosed\n")
    with pytest.raises(CuratedDataError, match=r"cases\.yaml: invalid YAML"):
        build_kg("legal", tmp_path)


def _reference_normalise(text: str) -> str:
    """The original per-character definition of alias normalisation."""
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text.casefold()).split())


def test_fast_alias_normalisation_matches_the_reference_on_every_code_point():
    import sys

    from knowledge_graphs.model import normalise_alias

    for start in range(0, sys.maxunicode + 1, 4096):
        chunk = "".join(chr(i) for i in range(start, min(start + 4096, sys.maxunicode + 1)) if not 0xD800 <= i <= 0xDFFF)
        for text in (chunk, f" a{chunk}b ", chunk.replace("a", " ")):
            assert normalise_alias(text) == _reference_normalise(text)


@pytest.mark.parametrize("text", ["Metformin  HCl.", "  42 U.S.C. § 1983 ", "Côte d'Ivoire", "T2DM_x", "\tß-Blocker\n", "", "..."])
def test_fast_alias_normalisation_examples(text):
    from knowledge_graphs.model import normalise_alias

    assert normalise_alias(text) == _reference_normalise(text)
