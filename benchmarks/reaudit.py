"""Re-audit throughput with real Celery workers: N stored records, W worker processes, Redis broker.

    python -m benchmarks.reaudit --json [--records 10000] [--workers 2] [--repeats 3] [--evaluator rules]

Records are appended through the audit log's own append function (hash-chained, with outbox rows),
with short realistic outputs of the three domains from `benchmarks/data/claims_*.jsonl`. Each repeat
is one re-audit job over all records (a new job id, so every record is scored again); workers are
started once and warmed up (KGs and packs loaded) before the clock starts. Reported:
records_per_s (median over repeats, from enqueue to the job being marked done), duplicates
(evaluations beyond one per record per job) and lost (records of a job left without an evaluation).

Database: AUDITOR_BENCH_DATABASE_URL, else a fresh schema in AUDITOR_TEST_POSTGRES_URL, else a
SQLite WAL file. Broker: AUDITOR_BENCH_REDIS_URL, else AUDITOR_TEST_REDIS_URL, else redis://127.0.0.1:6379/15.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from celery import Celery
from sqlalchemy import func, select

from auditor.jobs import reaudit, scoring
from auditor.jobs.settings import WorkerSettings
from auditor.jobs.worker import CeleryTaskQueue, configure
from auditor.store.database import ChainKey, Database
from auditor.store.scratch import scratch_schema
from auditor.trail.models import Evaluation
from auditor.trail.records import NewRecord, append_in_transaction

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "data"
HMAC_KEY = "benchmark-hmac-key-not-secret-0123456789"


def log(message: str) -> None:
    print(f"[reaudit-bench] {message}", file=sys.stderr, flush=True)


def realistic_outputs() -> Iterator[tuple[str, str]]:
    """(domain, output) pairs cycling over the labelled claim files of the three domains."""
    rows: list[tuple[str, str]] = []
    for domain in ("medical", "finance", "legal"):
        with (DATA / f"claims_{domain}.jsonl").open(encoding="utf-8") as handle:
            rows += [(domain, json.loads(line)["text"]) for line in handle if line.strip()]
    rows.sort(key=lambda row: zlib.crc32(row[1].encode()))   # interleave domains, the same order every run
    return itertools.cycle(rows)


@contextmanager
def bench_database(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    postgres = os.environ.get("AUDITOR_TEST_POSTGRES_URL")
    if not postgres:
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{Path(folder) / 'bench.db'}"
        return
    with scratch_schema(postgres, prefix="auditor_bench") as schema_url:
        yield schema_url


def append_records(database: Database, count: int, *, per_transaction: int = 200) -> float:
    """Append through the audit log's append (hash chain, outbox row), `per_transaction` records per commit."""
    start = time.perf_counter()
    outputs = realistic_outputs()
    for first in range(0, count, per_transaction):
        with database.write_connection() as conn:
            for index in range(first, min(count, first + per_transaction)):
                domain, output = next(outputs)
                record = NewRecord(tenant="bench", status="completed", endpoint="chat", domain=domain,
                                   model_id="bench-model", content_mode="raw", prompt=f"Question {index} ({domain})",
                                   output=output, delivered_output=output)
                append_in_transaction(conn, record, key=database.chain_key)
        if first and first % 2000 == 0:
            log(f"appended {first} records")
    return time.perf_counter() - start


def start_workers(count: int, *, database_url: str, redis_url: str, queue: str, evaluator: str,
                  log_dir: Path) -> list[subprocess.Popen[bytes]]:
    environment = {
        **os.environ, "AUDITOR_DATABASE_URL": database_url, "AUDITOR_REDIS_URL": redis_url,
        "AUDITOR_ENVIRONMENT": "test", "AUDITOR_HMAC_KEY": HMAC_KEY, "AUDITOR_AUTO_MIGRATE": "false",
        "AUDITOR_WORKER_EVALUATOR": evaluator, "AUDITOR_WORKER_QUEUE": queue,
        # Only the job is measured: no outbox dispatch / sweeping in the workers.
        "AUDITOR_WORKER_DISPATCH_INTERVAL_S": "0", "PYTHONPATH": str(REPO),
    }
    celery = str(Path(sys.executable).with_name("celery"))
    return [
        subprocess.Popen(
            [celery, "-A", "auditor.jobs.worker:celery_app", "worker", "--pool=solo", f"--queues={queue}",
             f"--hostname=bench{n}-{queue}@%h", "--without-gossip", "--without-mingle", "--loglevel=warning"],
            cwd=REPO, env=environment, stdout=(log_dir / f"worker{n}.log").open("wb"), stderr=subprocess.STDOUT)
        for n in range(count)
    ]


def wait_ready(app: Celery, names: list[str], timeout_s: float = 900.0) -> None:
    """Workers answer pings only after `worker_init` (evaluator warm-up) has finished."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replies = app.control.ping(destination=names, timeout=1.0) or []
        if len(replies) == len(names):
            return
    raise TimeoutError(f"workers not ready after {timeout_s}s")


def run_job(database: Database, queue: CeleryTaskQueue, evaluator_version: str, chunk_size: int) -> dict[str, Any]:
    job_id = reaudit.create_job(database, tenant="bench", tenant_scope=None, evaluator_version=evaluator_version,
                                filters=reaudit.ReauditFilter(), chunk_size=chunk_size)
    start = time.perf_counter()
    reaudit.start_job(database, queue, job_id)
    while True:
        with database.session() as session:
            job = reaudit.get_job(session, job_id, tenant_scope=None)
            if job.status == "done":
                break
        time.sleep(0.2)
    elapsed = time.perf_counter() - start
    with database.session() as session:
        rows = session.execute(select(func.count(), func.count(func.distinct(Evaluation.record_id)))
                               .where(Evaluation.job_id == job_id)).one()
        failed = session.execute(select(func.count()).select_from(Evaluation)
                                 .where(Evaluation.job_id == job_id, Evaluation.status == "failed")).scalar_one()
    evaluations, distinct_records = rows
    return {"job_id": job_id, "seconds": elapsed, "records_per_s": job.total / elapsed,
            "duplicates": evaluations - distinct_records, "lost": job.total - distinct_records,
            "failed": failed, "summary": job.summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk-size", type=int, default=100)
    parser.add_argument("--evaluator", default="rules", help='"rules" or module:attribute')
    args = parser.parse_args()
    redis_url = (os.environ.get("AUDITOR_BENCH_REDIS_URL") or os.environ.get("AUDITOR_TEST_REDIS_URL")
                 or "redis://127.0.0.1:6379/15")
    queue_name = f"auditor-bench-{uuid.uuid4().hex[:8]}"
    with bench_database(os.environ.get("AUDITOR_BENCH_DATABASE_URL")) as url, \
            tempfile.TemporaryDirectory() as log_dir:
        database = Database(url, sqlite_synchronous="NORMAL", chain_key=ChainKey(HMAC_KEY.encode(), 1000))
        database.upgrade()
        log(f"appending {args.records} records to {database.engine.url.get_backend_name()}")
        append_s = append_records(database, args.records)
        app = configure(Celery("auditor-bench"), redis_url=redis_url, settings=WorkerSettings())
        queue = CeleryTaskQueue(app, queue=queue_name)
        workers = start_workers(args.workers, database_url=url, redis_url=redis_url, queue=queue_name,
                                evaluator=args.evaluator, log_dir=Path(log_dir))
        try:
            log(f"waiting for {args.workers} workers to warm up")
            warm_start = time.perf_counter()
            import socket

            wait_ready(app, [f"bench{n}-{queue_name}@{socket.gethostname()}" for n in range(args.workers)])
            warm_s = time.perf_counter() - warm_start
            version = scoring.evaluator_version(args.evaluator)
            runs = []
            for repeat in range(args.repeats):
                runs.append(run_job(database, queue, version, args.chunk_size))
                log(f"repeat {repeat + 1}: {runs[-1]['records_per_s']:.1f} records/s")
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(timeout=30)
            database.dispose()
            import redis

            redis.Redis.from_url(redis_url).delete(queue_name)
    summary = runs[-1]["summary"]
    result = {
        "benchmark": "reaudit", "records": args.records, "workers": args.workers, "chunk_size": args.chunk_size,
        "repeats": args.repeats, "database": url.split(":", 1)[0], "evaluator": version,
        "records_per_s": round(statistics.median(r["records_per_s"] for r in runs), 1),
        "records_per_s_each": [round(r["records_per_s"], 1) for r in runs],
        "job_seconds_each": [round(r["seconds"], 2) for r in runs],
        "duplicates": max(r["duplicates"] for r in runs), "lost": max(r["lost"] for r in runs),
        "failed": max(r["failed"] for r in runs),
        "append_records_per_s": round(args.records / append_s, 1), "worker_warm_up_s": round(warm_s, 1),
        "fer_after_mean": summary["fer_after"]["mean"], "fer_after_scored": summary["fer_after"]["scored"],
    }
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
