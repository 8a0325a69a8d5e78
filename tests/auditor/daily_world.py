"""A compliance officer's world for the daily-task tests: a running service (fake engine, real validators and rule
packs, embedded worker scoring with the real evaluator), keys for each role, live answers and imported answers
of another model, and the CLI on the same store.

The imported answers are the ones issue 17 names (a Metformin dose of 5000 mg, Lisinopril at 400 mg, Brown dated
1955, the fabricated Varghese citation), with their own timestamps: one medical answer is three days old, so
"the last day" must leave it out although it was imported a moment ago."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from auditor.app import create_app
from auditor.auth.keys import create_key
from auditor.packs.source import StorePacks
from auditor.store.database import Database
from auditor.trail.models import AuditRecord, Evaluation
from rules.packs import PACK_DIR
from tests.auditor.conftest import TEST_HMAC_KEY, FakeEngine, make_settings
from tests.cli_runner import run_cli

LIVE_REPLY = "The maximum daily dose of Metformin for adults is 5000 mg."
# (name, domain, hours ago, output)
IMPORTED = [
    ("metformin", "medical", 2, "The maximum daily dose of Metformin for adults is 5000 mg."),
    ("lisinopril", "medical", 5, "Lisinopril is usually taken at 400 mg per day for hypertension."),
    ("old_metformin", "medical", 72, "Metformin: take up to 5000 mg per day."),
    ("diabetes", "medical", 1, "Metformin is a first-line treatment for type 2 diabetes."),
    ("brown", "legal", 1, "See Brown v. Board of Education, 347 U.S. 483 (1955)."),
    ("varghese", "legal", 4, "The court held so in Varghese v. China Southern Airlines Co., Ltd., 925 F.3d 1339 (11th Cir. 2019)."),
    ("isin", "finance", 2, "Apple's ISIN is US0378331005."),
]


@dataclass
class World:
    client: httpx.Client                      # a TestClient in-process; an httpx client when served
    database: Database
    url: str
    pack_dir: Path
    keys: dict[str, str]                      # role -> key
    key_ids: dict[str, str]                   # role -> key id
    imported: dict[str, str] = field(default_factory=dict)   # name -> audit id
    live: list[str] = field(default_factory=list)
    import_id: str | None = None
    cli_env: dict[str, str] = field(default_factory=dict)
    monkeypatch: pytest.MonkeyPatch | None = None
    base_url: str | None = None               # set when served on a real port

    def headers(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[role]}"}

    def get(self, path: str, role: str = "auditor", **params: Any) -> Any:
        response = self.client.get(path, params=params, headers=self.headers(role))
        assert response.status_code == 200, response.text
        return response.json()

    def cli(self, *args: str) -> tuple[int, str, str]:
        """`auditor <args>` in-process on the same store: (exit status, stdout, stderr)."""
        assert self.monkeypatch is not None
        return run_cli(self.monkeypatch, self.cli_env, *args)

    def wait_scored(self, timeout_s: float = 180.0) -> None:
        """Until every completed record has its live evaluation (the embedded worker scores through the outbox)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.database.session() as session:
                records = session.execute(select(func.count()).select_from(AuditRecord).where(
                    AuditRecord.kind == "record", AuditRecord.status == "completed")).scalar_one()
                scored = session.execute(select(func.count(func.distinct(Evaluation.record_id)))
                                         .where(Evaluation.job_id.is_(None))).scalar_one()
            if scored >= records:
                return
            time.sleep(0.2)
        raise AssertionError(f"{scored} of {records} records scored after {timeout_s}s")


def import_lines(now: datetime) -> list[str]:
    return [json.dumps({"prompt": f"question about {name}", "output": output, "domain": domain,
                        "model": "other-llm-7b", "timestamp": (now - timedelta(hours=hours)).isoformat(),
                        "id": name}) for name, domain, hours, output in IMPORTED]


def open_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, serve: bool = False) -> Iterator[World]:
    """The world, populated and scored (a generator for a fixture to yield from). `serve`: on a real HTTP
    port (uvicorn in a thread, for a browser) with `World.base_url` set; else in-process."""
    from auditor.serving.runtime import RulesVerifier, load_kgs

    pack_dir = tmp_path / "packs"
    shutil.copytree(PACK_DIR, pack_dir)
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    overrides = {"rule_pack_dir": pack_dir, "rule_pack_refresh_s": 0.2, "alert_check_interval_s": 0.2,
                 "alert_retry_delays_s": [0.2, 0.2], "default_content_mode": "raw"}
    settings = make_settings(url, **overrides)
    monkeypatch.setenv("AUDITOR_WORKER_EVALUATOR", "rules")
    database = Database.from_settings(settings)
    database.upgrade()
    verifier = RulesVerifier(load_kgs(settings.domains), StorePacks(database, directory=pack_dir, refresh_s=0.2))
    app = create_app(settings, engine=FakeEngine(LIVE_REPLY), verifier=verifier)
    server = LiveServer(app).start() if serve else None
    client = httpx.Client(base_url=server.url, timeout=60) if server else TestClient(app)
    client.__enter__()
    keys, key_ids = {}, {}
    with database.session() as session:
        for role, tenant in (("client", "acme"), ("reviewer", "acme"), ("auditor", "acme"), ("admin", "ops")):
            key, plaintext = create_key(session, tenant=tenant, role=role, name=f"{role} key")
            keys[role], key_ids[role] = plaintext, key.id
    cli_env = {"AUDITOR_DATABASE_URL": url, "AUDITOR_ENVIRONMENT": "test", "AUDITOR_HMAC_KEY": TEST_HMAC_KEY,
               "AUDITOR_CHECKPOINT_INTERVAL": "5", "AUDITOR_RULE_PACK_DIR": str(pack_dir),
               "AUDITOR_RULE_PACK_REFRESH_S": "0.2", "AUDITOR_WORKER_EVALUATOR": "rules",
               "AUDITOR_DEFAULT_CONTENT_MODE": "raw"}
    state = World(client, database, url, pack_dir, keys, key_ids, cli_env=cli_env, monkeypatch=monkeypatch,
                  base_url=server.url if server else None)
    try:
        _populate(state)
        yield state
    finally:
        client.__exit__(None, None, None)
        if server:
            server.stop()
        database.dispose()


class LiveServer:
    """The app on a free loopback port, served by uvicorn in a thread (its lifespan runs there too)."""

    def __init__(self, app: Any) -> None:
        import socket

        import uvicorn

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread: Any = None

    def start(self, timeout_s: float = 120.0) -> LiveServer:
        import threading

        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the live server did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def _populate(state: World) -> None:
    for _ in range(2):   # live answers through the gate: the wrong dose is blocked before it reaches the client
        response = state.client.post("/v1/chat/completions", headers={**state.headers("client"), "X-Intent": "medical-diagnosis"},
                                     json={"model": "auditor-medical",
                                           "messages": [{"role": "user", "content": "Max daily Metformin dose?"}]})
        assert response.status_code == 200, response.text
        state.live.append(response.headers["x-audit-id"])
    now = datetime.now(UTC)
    response = state.client.post("/v1/imports", params={"filename": "other-llm.jsonl", "strict": "true"},
                                 content="\n".join(import_lines(now)).encode(), headers=state.headers("auditor"))
    assert response.status_code == 201, response.text
    state.import_id = response.json()["id"]
    with state.database.session() as session:
        rows = session.execute(select(AuditRecord.id, AuditRecord.details).where(AuditRecord.endpoint == "import")).all()
    state.imported = {details["external_id"]: record_id for record_id, details in rows}
    state.wait_scored()


def webhook_server() -> tuple[str, list[dict[str, Any]], Callable[[], None]]:
    """A local webhook that fails its first call (500) and records every body: (url, bodies, stop)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:   # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            self.send_response(500 if len(bodies) == 1 else 200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/hook", bodies, server.shutdown
