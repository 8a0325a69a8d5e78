"""The load generator against a real HTTP server (uvicorn in a thread): open and closed loops stay within their
bounds, results are measured and summarised per intent, hallucination rates come from the records, and, on the
real engine with one seat, the scheduler's intent priorities show in the TTFTs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from auditor.app import create_app
from auditor.auth.keys import create_key
from auditor.loadgen.report import ALL
from auditor.loadgen.run import LoadSpec, run_load
from auditor.loadgen.sweep import Workload, measure
from auditor.loadgen.workload import load_prompts, parse_mix, parse_slas, plan
from auditor.serving import runtime
from engine.config import EngineConfig
from engine.outputs import RequestOutput
from tests.auditor.conftest import FakeEngine, ScriptedVerifier, make_settings
from tests.auditor.real_engine import tiny_medical_kg
from tests.auditor.served import served

pytestmark = pytest.mark.timeout(240)
MIX = parse_mix("medical-diagnosis=0.5,code-completion=0.5")
PROMPTS = load_prompts(None, MIX)


@pytest.fixture(autouse=True)
def _light_background_scoring(monkeypatch: pytest.MonkeyPatch) -> None:
    # The embedded worker's default evaluator builds the full medical KG on first use: seconds of CPU in the
    # server's process that would land inside the latencies these tests measure.
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "tests.auditor.scoring_doubles:MarkerEvaluator")


class SlowEngine(FakeEngine):
    def __init__(self, delay_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay_s = delay_s

    async def generate(self, *args: Any, **kwargs: Any) -> AsyncIterator[RequestOutput]:
        await asyncio.sleep(self.delay_s)
        async for out in super().generate(*args, **kwargs):
            yield out


@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator[str]:
    engine = FakeEngine(reply="Aspirin is safe. Warfarin doubles the dose.")
    verifier = ScriptedVerifier({"Warfarin": ("contradicted", None), "Aspirin": ("supported", None)})
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'audit.db'}"), engine=engine, verifier=verifier)
    with served(app) as url:
        yield url


def _workload(slas: list[str] = ()) -> Workload:
    return Workload(MIX, PROMPTS, parse_slas(list(slas), MIX))


def test_open_loop_measures_each_request_and_reads_the_records(fake_server: str) -> None:
    spec = LoadSpec(base_url=fake_server, rate=40, duration_s=1.0, max_tokens=16, seed=1)
    summary = asyncio.run(measure(spec, _workload(["medical-diagnosis:ttft_p99=30s", "*:e2e_p50=1ms"]), tag="t"))
    every = summary["intents"][ALL]
    assert 15 <= every["requests"] <= 70 and every["ok"] == every["requests"]   # Poisson: 40 expected
    assert every["records"] == every["ok"]
    assert every["fer"] == 0.5 and every["verified_claims"] == 2 * every["ok"]
    assert every["ttft_p50_ms"] > 0 and every["e2e_p99_ms"] >= every["e2e_p50_ms"]
    assert summary["intents"]["medical-diagnosis"]["requests"] + summary["intents"]["code-completion"]["requests"] \
        == every["requests"]
    met = {sla["sla"]: sla["met"] for sla in summary["slas"]}
    assert met == {"medical-diagnosis:ttft_p99<=30000ms": True, "*:e2e_p50<=1ms": False}
    assert every["goodput_req_s"] == 0   # nobody met the 1 ms end-to-end objective


def test_the_schedule_is_poisson_and_seeded(fake_server: str) -> None:
    spec = LoadSpec(base_url=fake_server, rate=50, duration_s=1.5, max_tokens=4, seed=7)
    runs = [asyncio.run(run_load(spec, plan(MIX, PROMPTS, seed=7, tag=f"p{k}"))) for k in range(2)]
    sent = [sorted(r.sent_at for r in run.results) for run in runs]
    assert len(sent[0]) == len(sent[1])
    gaps = [b - a for a, b in zip(sent[0], sent[0][1:], strict=False)]
    assert 0.01 < sum(gaps) / len(gaps) < 0.04             # mean 1/rate = 20 ms
    assert max(gaps) > 3 * min(gaps)                         # exponential gaps, not a metronome


def test_bounds_requests_users_and_drain(tmp_path: Path) -> None:
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'audit.db'}"), engine=SlowEngine(0.05))
    with served(app) as url:
        capped = asyncio.run(run_load(LoadSpec(base_url=url, rate=200, duration_s=5, max_requests=5),
                                      plan(MIX, PROMPTS, seed=0, tag="c")))
        assert len(capped.results) == 5 and capped.elapsed_s < 5
        closed = asyncio.run(run_load(LoadSpec(base_url=url, users=3, duration_s=10, max_requests=7),
                                      plan(MIX, PROMPTS, seed=0, tag="u")))
        assert len(closed.results) == 7 and all(r.ok for r in closed.results)
    slow = create_app(make_settings(f"sqlite:///{tmp_path / 'slow.db'}"), engine=SlowEngine(5.0))
    with served(slow) as url:
        spec = LoadSpec(base_url=url, rate=20, duration_s=0.3, drain_s=0.5, seed=2)
        run = asyncio.run(run_load(spec, plan(MIX, PROMPTS, seed=0, tag="d")))
        assert run.cancelled >= 1 and run.elapsed_s < 2
        assert sum(1 for r in run.results if r.error == "cancelled") == run.cancelled


def test_a_full_concurrency_cap_is_reported(tmp_path: Path) -> None:
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'audit.db'}"), engine=SlowEngine(0.3))
    with served(app) as url:
        spec = LoadSpec(base_url=url, rate=100, duration_s=0.5, max_concurrency=2, seed=3)
        run = asyncio.run(run_load(spec, plan(MIX, PROMPTS, seed=0, tag="m")))
    assert run.delayed > 0 and all(r.ok for r in run.results)


def test_without_an_auditor_key_the_records_are_unavailable(tmp_path: Path) -> None:
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'audit.db'}"), engine=FakeEngine())
    with served(app) as url:
        with app.state.services.database.session() as session:
            client_key = create_key(session, tenant="acme", role="client")[1]
        spec = LoadSpec(base_url=url, users=2, duration_s=5, max_requests=4, api_key=client_key)
        summary = asyncio.run(measure(spec, _workload(), tag="k"))
    assert summary["intents"][ALL]["ok"] == 4
    assert summary["records_unavailable"].startswith("403")


def test_errors_are_counted_by_kind(tmp_path: Path) -> None:
    class Refusing(FakeEngine):
        async def generate(self, *args: Any, **kwargs: Any) -> AsyncIterator[RequestOutput]:
            from engine.errors import EngineDeadError

            raise EngineDeadError("engine core restarting")
            yield  # pragma: no cover

    app = create_app(make_settings(f"sqlite:///{tmp_path / 'audit.db'}"), engine=Refusing())
    with served(app) as url:
        summary = asyncio.run(measure(LoadSpec(base_url=url, users=1, duration_s=5, max_requests=3), _workload(),
                                      tag="e"))
    assert summary["intents"][ALL]["errors"] == {"engine_unavailable": 3}
    assert summary["intents"][ALL]["ok"] == 0 and summary["intents"][ALL]["ttft_p99_ms"] is None


def test_high_priority_intents_wait_less_under_load(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """The real engine with one seat and an open-loop burst it cannot keep up with: medical-diagnosis (class 0)
    is admitted before code-completion (class 2), so its TTFT stays well below."""
    kgs = {"medical": tiny_medical_kg()}
    engine = runtime.load_engine(tiny_checkpoint, kgs, config=EngineConfig(max_num_seqs=1, aging_seconds=30.0))
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'audit.db'}"), engine=engine,
                     verifier=runtime.RulesVerifier(kgs), knowledge=runtime.KgKnowledge(kgs))
    with served(app) as url:
        spec = LoadSpec(base_url=url, rate=60, duration_s=1.0, max_tokens=48, seed=5)
        summary = asyncio.run(measure(spec, _workload(), tag="prio"))
        engine_stats = app.state.services.engine.stats()
    high, low = summary["intents"]["medical-diagnosis"], summary["intents"]["code-completion"]
    assert high["ok"] >= 10 and low["ok"] >= 10
    assert high["ttft_p50_ms"] * 2 < low["ttft_p50_ms"]
    assert high["queue_p99_ms"] < low["queue_p99_ms"]
    assert engine_stats["num_requests_waiting_by_priority"] == {"0": 0, "1": 0, "2": 0}


def test_measure_uses_its_own_copy_of_the_spec(fake_server: str) -> None:
    spec = LoadSpec(base_url=fake_server, rate=10, duration_s=0.3)
    asyncio.run(measure(replace(spec, rate=20), _workload(), tag="r"))
    assert spec.rate == 10


def test_the_sweep_settings_reach_the_engine_config() -> None:
    options = runtime.engine_options(make_settings("sqlite://", engine_max_num_seqs=4, engine_aging_seconds=20.0))
    assert options["config"].max_num_seqs == 4 and options["config"].aging_seconds == 20.0
    assert runtime.engine_options(make_settings("sqlite://"))["config"].aging_seconds == EngineConfig().aging_seconds
