"""`auditor verify`: JSON and table output, one-line errors for bad input."""

import importlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from auditor.cli import main
from tests.rules.kgs import legal_kg

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def small_kg(monkeypatch):
    """The CLI loads the domain KG; tests use the small one so they do not depend on the curated data."""
    verify_module = importlib.import_module("rules.verify")   # `rules.verify` the attribute is the function
    monkeypatch.setattr(verify_module, "_load_kg", lambda domain: legal_kg() if domain == "legal" else None)


def test_json_output(tmp_path, capsys) -> None:
    source = tmp_path / "answer.txt"
    source.write_text("Brown v. Board of Education, 347 U.S. 483 (1955), and 42 U.S.C. § 1983 apply.")
    assert main(["verify", "--domain", "legal", "--json", str(source)]) == 1   # the gate would block it
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"claims", "citations", "fer", "citation_confidence", "joint_score", "versions"}
    first, year = out["claims"][0], out["claims"][1]
    assert set(first) >= {"text", "span", "kind", "verdict", "confidence", "evidence"}
    # the citation is right, the year in its parenthetical is not: two claims
    assert first["verdict"] == "supported" and first["span"] == [0, 41]
    assert (year["kind"], year["verdict"], year["span"]) == ("case_year", "contradicted", [43, 47])
    assert out["fer"] == pytest.approx(1 / 3)


def test_table_output_from_stdin(monkeypatch, capsys) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(b"Smith v. Jones, 12 Foo.Rep. 44 (1999)."))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert main(["verify", "--domain", "legal"]) == 1   # a fabricated citation: the gate would block it
    out = capsys.readouterr().out
    assert "contradicted" in out and "Foo.Rep." in out and "gate: block" in out


@pytest.mark.parametrize(
    ("args", "content", "message"),
    [
        (["--domain", "astrology"], b"text", "unknown domain 'astrology'"),
        (["--domain", "legal"], b"   \n", "is empty"),
        (["--domain", "legal"], b"\xff\xfe\x00bad", "not UTF-8"),
        (["--domain", "legal", "--pack", "/nonexistent/pack.yaml"], b"text", "no rule pack at"),
    ],
)
def test_errors_are_one_line(tmp_path, capsys, args, content, message) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(content)
    assert main(["verify", *args, str(source)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_file(capsys) -> None:
    assert main(["verify", "--domain", "legal", "/nonexistent/answer.txt"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_exit_status_is_zero_when_the_gate_lets_the_text_through(tmp_path, capsys) -> None:
    source = tmp_path / "answer.txt"
    source.write_text("Brown v. Board of Education, 347 U.S. 483 (1954), ended segregation in public schools.")
    assert main(["verify", "--domain", "legal", str(source)]) == 0
    assert "gate:" not in capsys.readouterr().out


def test_malformed_pack_is_one_line(tmp_path, capsys) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_text("domain: legal\nversion: '1'\nrules:\n  - {id: legal.x, description: d, validator: legal.statute,"
                    " severity: dire, on_fail: block}\n")
    source = tmp_path / "in.txt"
    source.write_text("42 U.S.C. § 1983")
    assert main(["verify", "--domain", "legal", "--pack", str(pack), str(source)]) == 2
    err = capsys.readouterr().err
    assert "rules[0] (id 'legal.x'): field 'severity'" in err and err.count("\n") == 1


def test_console_script_subprocess() -> None:
    """The installed `auditor` entry point, end to end (real bundled pack; the KG may be the full one)."""
    result = subprocess.run([str(REPO / ".venv/bin/auditor"), "verify", "--domain", "legal", "--json", "-"],
                            input=b"Smith v. Jones, 12 Foo.Rep. 44 (1999).", capture_output=True, timeout=120, cwd=REPO)
    assert result.returncode == 1, result.stderr.decode()   # exit 1: the gate would block this text
    report = json.loads(result.stdout)
    assert report["claims"][0]["verdict"] == "contradicted"
    empty = subprocess.run([str(REPO / ".venv/bin/auditor"), "verify", "--domain", "legal", "-"], input=b"",
                           capture_output=True, timeout=60, cwd=REPO)
    assert empty.returncode == 2 and b"empty" in empty.stderr and b"Traceback" not in empty.stderr
