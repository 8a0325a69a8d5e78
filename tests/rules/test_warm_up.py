"""The warm-up sentences build every registry the validators would otherwise build inside a request.

Each check runs in a fresh interpreter: the registries are per process, and this test process may have built
them already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHECK = """
import courts_db
from rules.verify import verify
from rules.warm_up import WARM_UP_TEXTS
assert "regexes" not in vars(courts_db)
verify(WARM_UP_TEXTS["legal"], domain="legal")
# courts-db compiles its thousands of court regexes on first use (~0.7 s; under load several request threads
# compiled them at once): the warm-up must be that first use
assert "regexes" in vars(courts_db), "the legal warm-up never reached courts-db"
# the court records by id (a second parse of courts-db's JSON, ~5 MB kept): a soak saw them built mid-traffic
from rules.validators.legal import citations
assert citations._courts_by_id.cache_info().currsize == 1, "the legal warm-up never reached the courts by id"
"""


def test_the_legal_warm_up_compiles_courts_db_regexes() -> None:
    done = subprocess.run([sys.executable, "-c", _CHECK], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
