"""Time from `auditor serve` to `/ready` (200): cold (no KG-constraint index on disk) and warm (the index
written by the cold start), in turns. The bundled model, SQLite, the engine core in its own process.

Keys: cold_ready_s, warm_ready_s (medians), per_round, load_average.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks._common import emit, log
from benchmarks._service import load_average, start_server, thread_env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--rounds", type=int, default=1, help="cold + warm pairs")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of the engine")
    args = parser.parse_args(argv)
    rounds = []
    for index in range(args.rounds):
        cache = Path(tempfile.mkdtemp(prefix="kg-index-"))
        times = {}
        for kind in ("cold", "warm"):
            log(f"round {index + 1}: {kind} start (load average {load_average()})")
            server = start_server(env={**thread_env(args.threads), "AUDITOR_INDEX_CACHE_DIR": str(cache)})
            times[kind] = round(server.ready_s, 2)
            server.stop()
        shutil.rmtree(cache, ignore_errors=True)
        rounds.append(times)
    emit({"cold_ready_s": statistics.median(r["cold"] for r in rounds),
          "warm_ready_s": statistics.median(r["warm"] for r in rounds),
          "per_round": rounds, "load_average": load_average()}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
