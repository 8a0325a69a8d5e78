"""What `auditor serve` imports on its way to `/ready`: only its own command, no torch in the API process (the
engine core has it), and the deferred modules as stand-ins. Each check runs in a fresh interpreter, since this
one has imported everything already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _run(code: str) -> None:
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_serve_command_builds_its_own_parser_only() -> None:
    _run("""
import sys
from auditor import cli
args = cli.build_parser(cli._command_module(["serve", "--port", "1"])).parse_args(["serve", "--port", "1"])
assert args.command == "serve" and args.port == 1
loaded = [name for name in ("rules", "auditor.trail.queries", "simple_icd_10_cm", "eyecite") if name in sys.modules]
assert not loaded, loaded
""")


def test_the_other_commands_and_help_still_build_every_parser() -> None:
    from auditor import cli

    assert cli._command_module(["engine-core"]) == "engine_core"
    assert cli._command_module(["--help"]) is None and cli._command_module([]) is None
    assert cli._command_module(["no-such-command"]) is None
    assert set(cli.build_parser()._subparsers._group_actions[0].choices) >= {"serve", "engine-core", "audits"}


def test_the_api_process_loads_the_app_and_checks_the_engine_settings_without_torch() -> None:
    _run("""
import sys
from auditor.serving.deferred_imports import defer
defer()
import auditor.app
from auditor.serving.engine_loading import check_engine_settings
from auditor.settings import Settings
check_engine_settings(Settings())
assert "torch" not in sys.modules, "torch imported in the API process"
""")



def test_eyecite_is_imported_on_first_use_and_by_the_deferred_loader() -> None:
    _run("""
import sys
from rules.validators.legal.citation_parsing import find_case_citations
assert "eyecite" not in sys.modules, "imported with the validators"
found = find_case_citations("The court relied on Marbury v. Madison, 5 U.S. 137 (1803).")
assert "eyecite" in sys.modules and [(c.volume, c.page) for c in found] == [("5", "137")], found
""")
    _run("""
import sys
from auditor.serving.deferred_imports import load_deferred
import rules.validators.legal.citation_parsing
load_deferred()
assert "eyecite.tokenizers" in sys.modules
""")


def test_requests_and_the_loader_importing_eyecite_at_once_all_get_it() -> None:
    # eyecite's modules import each other in a cycle: before eyecite_import, threads importing it for the first
    # time together failed (ImportError "partially initialized module" / KeyError 'eyecite') in 5 runs of 5
    _run("""
import threading
from auditor.serving.deferred_imports import load_deferred
from rules.validators.legal.citation_parsing import find_case_citations
barrier, failures = threading.Barrier(9), []
def cite():
    barrier.wait()
    try:
        found = find_case_citations("The court relied on Marbury v. Madison, 5 U.S. 137 (1803).")
        assert [(c.volume, c.page) for c in found] == [("5", "137")], found
    except Exception as exc:
        failures.append(repr(exc))
def preload():
    barrier.wait()
    try:
        load_deferred()
    except Exception as exc:
        failures.append(repr(exc))
threads = [threading.Thread(target=cite) for _ in range(8)] + [threading.Thread(target=preload)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
assert not failures, failures
""")


def test_malloc_arenas_are_limited_where_glibc_is() -> None:
    from engine.memory import limit_malloc_arenas

    assert limit_malloc_arenas(0) is False   # 0: glibc's default, nothing done
    if Path("/lib/x86_64-linux-gnu/libc.so.6").exists() or Path("/lib/aarch64-linux-gnu/libc.so.6").exists():
        assert limit_malloc_arenas(8) is True
