"""Importing 10,000 rows: a Supreme Court Database `cases` file into the legal KG and an OFAC `ofac-sdn` file
into the finance KG (both generated here, in the real column layouts, with made-up names and citations).

Per file: seconds to import (`auditor kg import`'s work: read, check every row, build the new version,
commit it to a SQLite store), seconds until a serving process serves it (the follower's build and warm-up:
linker, validator indexes, and the decoding constraint's masks on the bundled model's tokenizer), the
resident memory that adds, `rules.verify` throughput on the benchmark's 150-word answers before and after
(same answers with the per-text caches cleared, interleaved repeats, median), and linking latency per kB of text
before and after.

Run: python -m benchmarks.kg_import --json [--rows 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PROGRAMS = ["SDGT", "IRAN", "RUSSIA-EO14024", "UKRAINE-EO13662", "CYBER2", "NPWMD", "SDNTK", "GLOMAG", "IFSR", "DPRK3"]
_SYLLABLES = ["ka", "ra", "lo", "mi", "tan", "vel", "dor", "sen", "bri", "qua", "zan", "mor", "tel", "vis", "pra",
              "gor", "lin", "shar", "bek", "ost", "ul", "den", "fir", "hal", "jor", "kes", "nab", "pol", "rud", "sol"]


def _word(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()


def cases_file(path: Path, rows: int, rng: random.Random) -> Path:
    """SCDB case-centred columns; citations in volumes 700-999 of U.S. Reports, which no real case has yet, so
    they never collide with the packaged landmark index. A fifth of the cases are "United States v. ..."."""
    lines = ["caseId,docketId,dateDecision,decisionType,usCite,sctCite,ledCite,lexisCite,term,docket,caseName"]
    used: set[tuple[int, int]] = set()
    for i in range(rows):
        while (cite := (rng.randint(700, 999), rng.randint(1, 1200))) in used:
            pass
        used.add(cite)
        year = rng.randint(1950, 2024)
        # the real table names many cases "United States v. ...": a fifth here, so that a lookup by the
        # plaintiff's name meets a crowded bucket as it would in production
        plaintiff = "United States" if i % 5 == 0 else _word(rng, 3)
        name = f"{plaintiff} v. {_word(rng, 2)} {_word(rng, 3)}"
        lines.append(f"{year}-{i:05d},{year}-{i:05d}-01,{rng.randint(1, 12)}/{rng.randint(1, 28)}/{year},1,"
                     f"{cite[0]} U.S. {cite[1]},,,,{year},{rng.randint(1, 99)}-{rng.randint(100, 9999)},{name}")
    path.write_text("\n".join(lines) + "\n")
    return path


def sdn_file(path: Path, rows: int, rng: random.Random) -> Path:
    kinds = ["individual"] * 5 + ["-0- "] * 3 + ["vessel", "aircraft"]
    lines = []
    for i in range(rows):
        kind = rng.choice(kinds)
        if kind == "individual":
            name = f"{_word(rng, 3).upper()}, {_word(rng, 2)} {_word(rng, 2)}"
            remarks = f"DOB {rng.randint(1, 28)} Jan {rng.randint(1940, 2000)}; a.k.a. '{_word(rng, 3).upper()}, {_word(rng, 2)}'."
        elif kind == "-0- ":
            name = f"{_word(rng, 2).upper()} {_word(rng, 3).upper()} {rng.choice(['LLC', 'LTD.', 'JSC', 'FZE'])}"
            remarks = f"a.k.a. '{_word(rng, 2).upper()} {_word(rng, 2).upper()}'; Registration ID {rng.randint(1000, 99999)}."
        else:
            name = f"{_word(rng, 2).upper()} {_word(rng, 2).upper()}"
            remarks = f"IMO {9000000 + i}."
        programs = "] [".join(rng.sample(PROGRAMS, rng.choice([1, 1, 2])))
        kind_field = f'"{kind}"' if kind != "-0- " else kind
        lines.append(f'{100000 + i},"{name}",{kind_field},"{programs}",-0- ,-0- ,-0- ,-0- ,-0- ,-0- ,-0- ,"{remarks}"')
    path.write_text("\r\n".join(lines) + "\r\n")
    return path


def _rss_mb() -> float:
    """Resident memory after a collection, with freed heap handed back to the OS (glibc's malloc_trim), so
    that what it shows is live memory, not the allocator's high-water mark."""
    import ctypes

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    return _status_mb("VmRSS")


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _throughput(answers: list[str], domain: str, kgs: dict[str, Any], repeats: int) -> dict[str, dict[str, float]]:
    """rules.verify on the same answers under each KG, interleaved, median of the repeats: outputs per second
    of wall time, and per second of this process's CPU time (what an unloaded core would do). As in
    `verify_throughput`, the caches keyed by an answer's or a sentence's text are cleared before each answer."""
    from benchmarks.verify_throughput import timed_batch
    from rules import verify
    from rules.text_caches import clear_text_caches

    for kg in kgs.values():                  # warm: mention automata, case index, registries
        for text in answers[:10]:
            verify(text, domain, kg=kg)
    wall: dict[str, list[float]] = {name: [] for name in kgs}
    cpu: dict[str, list[float]] = {name: [] for name in kgs}
    for _ in range(repeats):
        for name, kg in kgs.items():
            wall_s, cpu_s = timed_batch(answers, domain, before_each=clear_text_caches, kg=kg)
            wall[name].append(len(answers) / wall_s)
            cpu[name].append(len(answers) / cpu_s)
    return {name: {"wall": round(statistics.median(wall[name]), 1), "cpu": round(statistics.median(cpu[name]), 1)}
            for name in kgs}


def _linking_ms_per_kb(texts: list[str], kgs: dict[str, Any], repeats: int) -> dict[str, float]:
    from knowledge_graphs.decoding.constraint import DOMAIN_DEFAULTS
    from knowledge_graphs.linking import get_linker

    out: dict[str, list[float]] = {name: [] for name in kgs}
    linkers = {name: get_linker(kg, DOMAIN_DEFAULTS[kg.domain].types) for name, kg in kgs.items()}
    kilobytes = sum(len(t.encode()) for t in texts) / 1024
    for _ in range(repeats):
        for name, linker in linkers.items():
            started = time.perf_counter()
            for text in texts:
                linker.link(text)
            out[name].append((time.perf_counter() - started) * 1000 / kilobytes)
    return {name: round(statistics.median(values), 3) for name, values in out.items()}


def _constraint_processor(domain: str, kg: Any) -> Any:
    """The KG-constraint processor on the bundled model's tokenizer, as the serving engine builds it."""
    from auditor.settings import Settings
    from engine.loader import generation_eos_ids, load_model_config
    from engine.tokenizer import Tokenizer
    from knowledge_graphs.decoding.constraint import KGConstraintProcessor

    path = Settings().resolved_model_path()
    config = load_model_config(path)
    tokenizer = Tokenizer.from_dir(path, list(dict.fromkeys(generation_eos_ids(path) + config.eos_token_ids)))
    return KGConstraintProcessor(tokenizer, vocab_size=config.vocab_size, eos_token_ids=tokenizer.eos_token_ids,
                                 kgs={domain: kg})


def run_one(fmt: str, domain: str, path: Path, store: str, repeats: int) -> dict[str, Any]:
    """The import runs as the operator runs it (`auditor kg import`, its own process); this process plays a
    serving replica: it warms the packaged version, then follows the store to the imported one."""
    from auditor.serving import runtime
    from benchmarks.verify_throughput import build_answers
    from knowledge_graphs import load_kg, packaged_kg

    packaged = packaged_kg(domain)
    answers = build_answers(domain, 100)
    texts = [" ".join(answers[i:i + 7]) for i in range(0, 70, 7)]       # ~1 kB each
    processor = _constraint_processor(domain, packaged)
    warm = runtime.kg_listeners(None, None, None)[0]
    warm(packaged)
    with imported_and_served(fmt, domain, path, store, [warm, lambda kg: processor.register(kg, domain=domain)]) as row:
        served = load_kg(domain)
        kgs = {"before": packaged, "after": served}
        throughput = _throughput(answers, domain, kgs, repeats)
        linking = _linking_ms_per_kb(texts, kgs, repeats)
    return {
        **row,
        "verify_outputs_per_s_before": throughput["before"]["wall"],
        "verify_outputs_per_s_after": throughput["after"]["wall"],
        "verify_outputs_per_cpu_s_before": throughput["before"]["cpu"],
        "verify_outputs_per_cpu_s_after": throughput["after"]["cpu"],
        "linking_ms_per_kb_before": linking["before"], "linking_ms_per_kb_after": linking["after"],
        "kg_entities_before": len(packaged), "kg_entities_after": len(served),
    }


@contextmanager
def imported_and_served(fmt: str, domain: str, path: Path, store: str, listeners: list[Any]) -> Iterator[dict[str, Any]]:
    """Import `path` as the operator does (its own process), then follow the store to the new version as a serving
    replica does (`listeners` warm it); yields the import's and the serving side's numbers while it is served."""
    from auditor.kg.live import LiveKnowledgeGraphs
    from auditor.store.database import Database
    from knowledge_graphs import load_kg

    database = Database(store)
    database.upgrade()
    imported = _import_as_the_operator(fmt, domain, path, store)
    rss_before = _rss_mb()
    live = LiveKnowledgeGraphs(database, [domain], refresh_s=0, listeners=listeners)
    started = time.perf_counter()
    live.refresh()
    serve_s = time.perf_counter() - started
    assert load_kg(domain).version == imported["version"]
    rss_served = _rss_mb()
    try:
        yield {"format": fmt, "domain": domain, "rows": imported["rows"],
               "file_mb": round(path.stat().st_size / 2**20, 2), "entities_added": imported["entities"],
               "facts_added": imported["facts"], "import_s": imported["seconds"],
               "import_rss_added_mb": imported["rss_added_mb"], "import_peak_added_mb": imported["peak_added_mb"],
               "until_served_s": round(serve_s, 2), "rss_added_serving_mb": round(rss_served - rss_before, 1)}
    finally:
        live.stop()
        database.dispose()


def _import_as_the_operator(fmt: str, domain: str, path: Path, store: str) -> dict[str, Any]:
    """The import in a process of its own, as `auditor kg import` runs it: seconds, memory it adds."""
    import subprocess

    env = {**os.environ, "AUDITOR_DATABASE_URL": store}
    done = subprocess.run([sys.executable, "-m", "benchmarks.kg_import", "--child-import", fmt, domain, str(path)],
                          env=env, capture_output=True, text=True, timeout=1800, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child_import(fmt: str, domain: str, path: Path) -> None:
    """After the packaged KG is loaded (the importer's fixed cost): the import's time, the live memory it
    leaves, and its peak above the start (the high-water mark is reset first: /proc/self/clear_refs)."""
    from auditor.kg import versions
    from auditor.settings import get_settings
    from auditor.store.database import Database
    from knowledge_graphs import packaged_kg

    packaged = packaged_kg(domain)
    database = Database.from_settings(get_settings())
    before = _rss_mb()
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    started = time.perf_counter()
    result = versions.import_file(database, packaged, fmt=fmt, path=path, as_of="2026-12-01", imported_by="benchmark")
    seconds = time.perf_counter() - started
    peak = _status_mb("VmHWM")
    print(json.dumps({"version": result.version.version_hash, "rows": result.rows, "entities": result.entities,
                      "facts": result.facts, "seconds": round(seconds, 2),
                      "rss_added_mb": round(_rss_mb() - before, 1), "peak_added_mb": round(peak - before, 1)}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=["cases", "ofac-sdn"], help="one file only")
    parser.add_argument("--child-import", nargs=3, metavar=("FORMAT", "DOMAIN", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_import:
        fmt, domain, file = args.child_import
        _child_import(fmt, domain, Path(file))
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="kg-import-bench-"))
    rng = random.Random(13)
    jobs = [("cases", "legal", cases_file(workdir / "scdb_cases.csv", args.rows, rng)),
            ("ofac-sdn", "finance", sdn_file(workdir / "sdn.csv", args.rows, rng))]
    results = [run_one(fmt, domain, path, f"sqlite:///{workdir / f'{fmt}.db'}", args.repeats)
               for fmt, domain, path in jobs if args.only in (None, fmt)]
    report = {"benchmark": "kg_import", "rows": args.rows, "repeats": args.repeats, "cpus": os.cpu_count(),
              "load_average": [round(x, 2) for x in os.getloadavg()], "results": results}
    if args.json:
        print(json.dumps(report))
    else:
        for row in results:
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
