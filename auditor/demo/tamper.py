"""Scene 4: a tampered copy of the trail, caught by `auditor audit verify-chain`.

The store is copied with SQLite's online backup (a consistent snapshot while the service writes), one
record of the copy is rewritten the way someone with write access to the database would hide an answer
(its output text, nothing else), and the real `auditor audit verify-chain` command runs on the copy and on
the original. The original is never written to.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from auditor.demo.service import DemoError, sqlite_path
from auditor.settings import Settings

TAMPERED_NAME = "audit-tampered.db"


@dataclass(frozen=True, slots=True)
class ChainCheck:
    database: Path
    exit_code: int
    output: str          # what the command printed (one line: "chain ok: ..." or "chain broken: ...")

    @property
    def command(self) -> str:
        return f"AUDITOR_DATABASE_URL=sqlite:///{self.database} auditor audit verify-chain"


@dataclass(frozen=True, slots=True)
class TamperResult:
    copy: Path
    record_id: str
    original_output: str
    tampered_output: str
    on_copy: ChainCheck
    on_original: ChainCheck


def tamper_and_verify(settings: Settings, *, record_id: str, replacement: str) -> TamperResult:
    """Copy the trail, rewrite `record_id`'s output in the copy, verify both with the CLI."""
    original = sqlite_path(settings)
    copy = original.with_name(TAMPERED_NAME)
    copy.unlink(missing_ok=True)
    with closing(sqlite3.connect(original)) as source, closing(sqlite3.connect(copy)) as target:
        source.backup(target)
        row = target.execute("SELECT output FROM audit_records WHERE id = ?", (record_id,)).fetchone()
        if row is None:
            raise DemoError(f"record {record_id} is not in the trail")
        with target:   # one transaction
            target.execute("UPDATE audit_records SET output = ? WHERE id = ?", (replacement, record_id))
    with ThreadPoolExecutor(2) as pool:   # two cold CLI starts: run them side by side
        on_copy, on_original = pool.map(verify_chain, (copy, original))
    return TamperResult(copy, record_id, row[0] or "", replacement, on_copy, on_original)


def verify_chain(database: Path) -> ChainCheck:
    """`auditor audit verify-chain` on a SQLite file, as an operator would run it."""
    env = {**os.environ, "AUDITOR_DATABASE_URL": f"sqlite:///{database}", "AUDITOR_ENVIRONMENT": "development"}
    done = subprocess.run([sys.executable, "-m", "auditor.cli", "audit", "verify-chain"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    output = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return ChainCheck(database, done.returncode, output[-1] if output else "")
