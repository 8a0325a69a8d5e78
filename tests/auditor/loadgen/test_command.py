"""`auditor loadgen` as a user runs it: bad input is one line and exit status 2, a run prints JSON and exits 1
when it missed an SLA, and a sweep over rates against a running server writes its CSV, table and charts."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from auditor.app import create_app
from auditor.cli import main
from tests.auditor.conftest import FakeEngine, ScriptedVerifier, make_settings
from tests.auditor.served import served

pytestmark = pytest.mark.timeout(240)
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "tests.auditor.scoring_doubles:MarkerEvaluator")
    engine = FakeEngine(reply="Aspirin is safe. Warfarin doubles the dose.")
    verifier = ScriptedVerifier({"Warfarin": ("contradicted", None), "Aspirin": ("supported", None)})
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'audit.db'}"), engine=engine, verifier=verifier)
    with served(app) as url:
        yield url


@pytest.mark.parametrize("argv, fragment", [
    (["--mix", "a=x"], "--mix: the weight of a is not a number"),
    (["--mix", "medical-diagnosis=1", "--sla", "fin-risk:ttft_p99=1s"], "not in the mix"),
    (["--url", "http://10.0.0.7:8000"], "not a loopback address"),
    (["--url", "https://api.openai.com"], "not a loopback address"),
    (["--rate", "-1"], "the rate must be above 0"),
    (["--rate", "nan"], "the rate must be above 0"),
    (["--duration", "0"], "the duration must be above 0"),
    (["--requests", "0"], "the request count"),
    (["--max-tokens", "0"], "max tokens"),
    (["--timeout", "-5"], "the request timeout"),
    (["--prompts", "/nonexistent/prompts.jsonl"], "cannot read the prompts file"),
    (["--url", "http://127.0.0.1:9"], "no service answers at http://127.0.0.1:9"),
    (["--sweep", "--rates", "1,x"], "--rates: expected comma-separated numbers"),
    (["--sweep", "--rates", "0"], "--rates: the rate must be above 0"),
    (["--sweep", "--constraint", "maybe"], "--constraint takes on, off or on,off"),
    (["--sweep", "--max-num-seqs", "0"], "--max-num-seqs: each size"),
    (["--sweep", "--users", "2"], "--sweep sweeps open-loop rates"),
    (["--sweep", "--url", "http://127.0.0.1:9", "--constraint", "off"], "need servers of their own"),
    (["--sweep", "--threads", "0"], "--threads must be between 1 and 256"),
    (["--sweep", "--rates", ",".join(["1"] * 61)], "a sweep measures at most 60"),
])
def test_bad_input_is_one_line_and_status_2(argv: list[str], fragment: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["loadgen", "--no-progress", "--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("auditor loadgen: error: ") and fragment in err and "\n" not in err


def test_an_unwritable_out_folder_is_refused_before_any_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["loadgen", "--sweep", "--no-progress", "--out", str(blocker / "sub")]) == 2
    assert "cannot write there" in capsys.readouterr().err


def test_run_as_a_module_errors_stay_one_line() -> None:
    # `python -m auditor.cli` runs cli.py as __main__: its errors must still be CliError lines, not tracebacks
    done = subprocess.run([sys.executable, "-m", "auditor.cli", "loadgen", "--mix", "a=x"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "auditor loadgen: error: --mix: the weight of a is not a number: 'x'"


def test_a_run_prints_json_and_exits_1_on_a_missed_sla(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["loadgen", "--url", server, "--users", "2", "--requests", "6", "--json",
            "--mix", "medical-diagnosis=1,code-completion=1"]
    assert main([*base, "--sla", "medical-diagnosis:ttft_p99=60s"]) == 0
    met = json.loads(capsys.readouterr().out)
    assert met["mode"] == "closed" and met["intents"]["all"]["ok"] == 6
    assert met["slas"][0]["met"] is True and met["intents"]["all"]["fer"] == 0.5
    assert main([*base, "--sla", "*:e2e_p50=0.001ms"]) == 1
    missed = json.loads(capsys.readouterr().out)
    assert missed["slas"][0]["met"] is False and missed["intents"]["all"]["goodput_req_s"] == 0


def test_the_table_names_every_intent(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["loadgen", "--url", server, "--rate", "20", "--duration", "0.5", "--no-progress",
                 "--mix", "fin-risk=1,legal-advice=1", "--sla", "fin-risk:e2e_p99=60s"]) == 0
    out = capsys.readouterr().out
    for name in ("fin-risk", "legal-advice", "all", "TTFT p99", "goodput", "SLA fin-risk:e2e_p99<=60000ms"):
        assert name in out


def test_a_sweep_over_rates_writes_csv_table_and_charts(server: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    assert main(["loadgen", "--sweep", "--url", server, "--rates", "10,20", "--duration", "0.6", "--no-progress",
                 "--mix", "medical-diagnosis=1,code-completion=1", "--out", str(out)]) == 0
    with open(out / "sweep.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["rate"], r["intent"]) for r in rows] == [
        (rate, intent) for rate in ("10.0", "20.0") for intent in ("medical-diagnosis", "code-completion", "all")]
    assert all(int(r["ok"]) == int(r["requests"]) > 0 for r in rows)
    assert {r["fer"] for r in rows if r["intent"] == "medical-diagnosis"} == {"0.5"}
    table = (out / "p99_table.md").read_text()
    assert table.count("\n") == 4 and "medical-diagnosis p99 TTFT / e2e (ms)" in table
    for name in ("latency_vs_throughput.png", "ttft_by_intent.png", "pareto.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().out
