"""The demo's service: the real app (`create_app`) under uvicorn in a background thread on a free 127.0.0.1
port, with the embedded defaults (SQLite audit store in a demo folder, in-process tasks, the bundled model)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from auditor.settings import Settings


class DemoError(RuntimeError):
    """The demo could not run (service failed to start, a request failed)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


STORE_NAME = "audit.db"
MARKER_NAME = ".auditor-demo"     # says the folder's store is the demo's own, to be recreated on each run
RUN_FILES = (STORE_NAME, f"{STORE_NAME}-wal", f"{STORE_NAME}-shm", "audit-tampered.db", "audit-tampered.db-wal",
             "audit-tampered.db-shm", "other-llm-answers.jsonl")


def prepare_workdir(workdir: Path, *, demo_default: bool) -> None:
    """A fresh store for each run: the scenes tell a story from an empty trail (a second run would find the
    sanctions list already imported). Only the demo's own store is removed: one in a folder the demo marked,
    or in its default folder; any other `audit.db` is refused."""
    workdir.mkdir(parents=True, exist_ok=True)
    marker = workdir / MARKER_NAME
    store = workdir / STORE_NAME
    if store.exists() and not marker.exists() and not demo_default:
        raise DemoError(f"{store} is an audit store the demo did not make; give --dir an empty or demo folder")
    marker.write_text("made by `auditor demo`: the audit store in this folder is recreated on each run\n")
    for name in RUN_FILES:
        (workdir / name).unlink(missing_ok=True)


def demo_settings(workdir: Path, *, model_path: Path | None, domains: list[str], port: int) -> Settings:
    """Embedded defaults: SQLite file under `workdir`, no broker (in-process tasks), development mode."""
    workdir.mkdir(parents=True, exist_ok=True)
    return Settings(
        environment="development", database_url=f"sqlite:///{(workdir / STORE_NAME).resolve()}",
        redis_url=None, model_path=model_path, host="127.0.0.1", port=port, domains=domains,
        default_content_mode="raw",   # the demo shows what was said; production defaults to "redacted"
    )


def sqlite_path(settings: Settings) -> Path:
    """The demo store's file (`demo_settings` always names one)."""
    prefix = "sqlite:///"
    assert settings.database_url.startswith(prefix), settings.database_url
    return Path(settings.database_url[len(prefix):])


@contextmanager
def running_service(settings: Settings, *, startup_timeout: float) -> Iterator[str]:
    """The real app under uvicorn in a background thread; yields its base URL once /health says ok."""
    import uvicorn

    from auditor.app import create_app

    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=settings.port, log_level="warning",
                            lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="auditor-demo-server", daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{settings.port}"
    try:
        _wait_until_healthy(base_url, thread, startup_timeout)
        yield base_url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _wait_until_healthy(base_url: str, thread: threading.Thread, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=base_url, timeout=5) as client:
        while time.monotonic() < deadline:
            if not thread.is_alive():
                raise DemoError("the service stopped while starting (see the log above)")
            try:
                if client.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass   # not listening yet
            time.sleep(0.5)
    raise DemoError(f"the service did not become healthy within {timeout:.0f} s")


def console_key(settings: Settings) -> str:
    """An auditor key of the demo's tenant for the console (the console always needs a key; creating one
    ends the demo store's development mode, so the scripted requests are sent first)."""
    from auditor.auth.keys import create_key
    from auditor.auth.principal import DEV_TENANT
    from auditor.store.database import Database

    database = Database.from_settings(settings)
    try:
        with database.session(write=True) as session:
            return create_key(session, tenant=DEV_TENANT, role="admin", name="demo console")[1]
    finally:
        database.dispose()


