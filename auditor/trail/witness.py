"""The external witness: signed ledger heads and checkpoints copied outside the database.

An attacker who holds the database and the HMAC key can rewrite a ledger and re-sign it so that it
verifies on its own. They cannot rewrite what the witness already saw: an append-only file on another
volume, or a Redis stream, set by `AUDITOR_CHAIN_WITNESS`:

    file:/mnt/witness/auditor.jsonl
    redis://witness-host:6379/0?stream=auditor:witness

`WitnessPublisher` copies every ledger's signed head (and its new checkpoints) there every
`interval_s`, after the commits that made them. `check_against_witness` compares the store with the
newest entry per ledger: since each entry's hash covers every earlier entry, a match at the newest
witnessed seq vouches for the whole prefix, and a store that ends before it was truncated or rolled
back. What was appended after the last publication is not yet covered: that window is `interval_s`.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse

from sqlalchemy import Connection, select

from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.chain import ChainProblem, sign_checkpoint, sign_head, sign_legacy
from auditor.trail.ledgers import LEDGERS
from auditor.trail.models import ChainHead, Checkpoint

logger = logging.getLogger("auditor.witness")
_BY_NUMBER = {ledger.number: ledger for ledger in LEDGERS}
_BY_NAME = {ledger.name: ledger for ledger in LEDGERS}


class WitnessError(ValueError):
    """A witness address that cannot be used, or a witness that cannot be reached."""


class Witness(Protocol):
    def append(self, entries: list[dict[str, Any]]) -> None: ...

    def entries(self) -> Iterator[dict[str, Any]]: ...


class FileWitness:
    """JSON lines appended with O_APPEND and fsynced per batch. Put it on another volume (or host mount)
    than the database; a torn last line (a crash mid-write) is skipped when reading."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, entries: list[dict[str, Any]]) -> None:
        if not entries:
            return
        data = "".join(json.dumps(entry, sort_keys=True) + "\n" for entry in entries).encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise WitnessError(f"cannot append to the witness file {self.path}: {exc.strerror or exc}") from exc

    def entries(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        try:
            with self.path.open(encoding="utf-8") as handle:
                for line in handle:
                    try:
                        yield json.loads(line)
                    except ValueError:
                        continue
        except OSError as exc:
            raise WitnessError(f"cannot read the witness file {self.path}: {exc.strerror or exc}") from exc


class RedisStreamWitness:
    """A Redis stream (XADD). Give the witness its own Redis, or at least one the database's holders cannot
    write to; with persistence (AOF) on, so a restart keeps it."""

    def __init__(self, url: str, stream: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self.stream = stream
        self._errors = redis.RedisError

    def append(self, entries: list[dict[str, Any]]) -> None:
        if not entries:
            return
        pipe = self.client.pipeline(transaction=False)
        for entry in entries:
            pipe.xadd(self.stream, {"entry": json.dumps(entry, sort_keys=True)})
        try:
            pipe.execute()
        except self._errors as exc:
            raise WitnessError(f"cannot append to the witness stream {self.stream}: {exc}") from exc

    def entries(self) -> Iterator[dict[str, Any]]:
        last = "-"
        while True:
            try:
                batch = self.client.xrange(self.stream, min=last, max="+", count=1000)
            except self._errors as exc:
                raise WitnessError(f"cannot read the witness stream {self.stream}: {exc}") from exc
            if last != "-":
                batch = batch[1:]   # xrange includes `min`
            if not batch:
                return
            for _id, fields in batch:
                yield json.loads(fields[b"entry"])
            last = batch[-1][0].decode()


def open_witness(address: str) -> Witness:
    """`file:/path`, a plain path, or `redis://host:port/db?stream=name`."""
    parsed = urlparse(address)
    if parsed.scheme in ("redis", "rediss"):
        stream = parse_qs(parsed.query).get("stream", ["auditor:witness"])[0]
        base = address.split("?", 1)[0]
        return RedisStreamWitness(base, stream)
    if parsed.scheme == "file":
        return FileWitness(Path(parsed.path))
    if parsed.scheme == "":
        return FileWitness(Path(address))
    raise WitnessError(f"unsupported witness address {address!r} (use file:/path or redis://host:port/db?stream=name)")


# -- publishing ------------------------------------------------------------------------------------


def current_entries(conn: Connection, *, after_checkpoint: dict[int, int]) -> list[dict[str, Any]]:
    """Each ledger's signed head, plus checkpoints newer than `after_checkpoint[ledger]`."""
    now = utcnow().isoformat()
    entries = []
    for cp in conn.execute(select(Checkpoint.__table__).order_by(Checkpoint.ledger, Checkpoint.seq)):
        if cp.seq > after_checkpoint.get(cp.ledger, 0) and cp.ledger in _BY_NUMBER:
            entries.append({"ledger": _BY_NUMBER[cp.ledger].name, "kind": "checkpoint", "seq": cp.seq,
                            "record_hash": cp.record_hash, "prev_seq": cp.prev_seq, "signature": cp.signature,
                            "at": now})
    for head in conn.execute(select(ChainHead.__table__).order_by(ChainHead.id)):
        if head.id in _BY_NUMBER and head.signature is not None and head.seq > 0:
            entries.append({"ledger": _BY_NUMBER[head.id].name, "kind": "head", "seq": head.seq,
                            "record_hash": head.record_hash, "last_checkpoint_seq": head.last_checkpoint_seq,
                            "signature": head.signature, "at": now})
    return entries


class WitnessPublisher:
    """Copies heads and checkpoints to the witness every `interval_s` (heads only when they moved)."""

    def __init__(self, database: Database, witness: Witness, *, interval_s: float = 1.0) -> None:
        self.database, self.witness, self.interval_s = database, witness, interval_s
        self._published_heads: dict[str, int] = {}
        self._published_checkpoints: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="auditor-witness", daemon=True)

    def start(self) -> WitnessPublisher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self.publish_once()   # what landed since the last pass
        except Exception:
            logger.exception("final chain witness publication failed")

    def publish_once(self) -> int:
        with self.database.engine.connect() as conn:
            entries = current_entries(conn, after_checkpoint=self._published_checkpoints)
        new = [e for e in entries if e["kind"] == "checkpoint" or self._published_heads.get(e["ledger"]) != e["seq"]]
        self.witness.append(new)
        for entry in new:
            if entry["kind"] == "head":
                self._published_heads[entry["ledger"]] = entry["seq"]
            else:
                number = _BY_NAME[entry["ledger"]].number
                self._published_checkpoints[number] = max(self._published_checkpoints.get(number, 0), entry["seq"])
        return len(new)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.publish_once()
            except Exception:   # the witness or the store may be briefly away; the next pass catches up
                logger.exception("chain witness publication failed")


# -- checking --------------------------------------------------------------------------------------


def check_against_witness(conn: Connection, witnessed: Iterable[dict[str, Any]],
                          hmac_key: bytes) -> tuple[ChainProblem | None, int]:
    """The first disagreement between the store and the witness entries, and how many were read. Read the
    witness *before* opening `conn`'s snapshot: entries are published after their commits, so everything read
    then is in the snapshot, while one published after the snapshot was taken would look like a rollback.
    Entries whose signature does not verify under the key are reported: someone wrote to the witness."""
    newest: dict[str, dict[str, Any]] = {}
    read = 0
    for entry in witnessed:
        read += 1
        ledger = _BY_NAME.get(entry.get("ledger", ""))
        if ledger is None:
            continue
        if not _signature_valid(entry, ledger.number, hmac_key):
            return ChainProblem("witness", int(entry.get("seq", 0)), None,
                                "a witness entry's signature does not verify (the witness was written to)",
                                ledger.name), read
        if entry["seq"] > newest.get(ledger.name, {"seq": 0})["seq"]:
            newest[ledger.name] = entry
    for name, entry in newest.items():
        table = _BY_NAME[name].table
        stored = conn.execute(select(table.c.record_hash).where(table.c.seq == entry["seq"])).scalar()
        if stored is None:
            last = conn.execute(select(table.c.seq).order_by(table.c.seq.desc()).limit(1)).scalar() or 0
            return ChainProblem("witness", entry["seq"], None,
                                f"the witness saw seq {entry['seq']} ({entry['kind']}, {entry['at']}) but the ledger "
                                f"ends at seq {last}: entries were deleted or the store was rolled back", name), read
        if stored != entry["record_hash"]:
            return ChainProblem("witness", entry["seq"], None,
                                f"seq {entry['seq']} differs from what the witness saw at {entry['at']}: the ledger was "
                                "rewritten and re-signed", name), read
    return None, read


def _signature_valid(entry: dict[str, Any], ledger: int, key: bytes) -> bool:
    if entry.get("kind") == "head":
        expected = sign_head(key, ledger, entry["seq"], entry["record_hash"], entry.get("last_checkpoint_seq"))
    else:
        expected = sign_checkpoint(key, ledger, entry["seq"], entry["record_hash"], entry.get("prev_seq"))
    signature = str(entry.get("signature", ""))
    if ledger == 1 and hmac.compare_digest(sign_legacy(key, entry["seq"], entry["record_hash"]), signature):
        return True   # a head or checkpoint signed by 0.1, before the upgrade
    return hmac.compare_digest(expected, signature)
