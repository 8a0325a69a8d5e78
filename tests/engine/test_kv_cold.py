"""The cold KV tier: a bounded, memory-mapped LRU of evicted prefix blocks. A restored block must be
byte-identical to the one saved; anything else (corrupt slot, lost or truncated file) recomputes."""

from __future__ import annotations

import gc
import os
import stat
from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig
from engine.kv_cold import ColdStore
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

BLOCK = 64   # bytes per block in the unit tests


def _payload(value: int) -> torch.Tensor:
    return torch.arange(BLOCK, dtype=torch.uint8) ^ value


def _files(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"kv-cold-*-{os.getpid()}-*.bin"))


# ---- the store -----------------------------------------------------------------------------------


def test_blocks_round_trip_through_a_private_file_of_fixed_size(tmp_path):
    store = ColdStore(tmp_path / "cold", 10 * BLOCK, BLOCK)
    store.put(11, (1, 2), _payload(1))
    store.put(12, (3, 4), _payload(2))
    assert torch.equal(store.load(11, (1, 2)), _payload(1))
    assert torch.equal(store.load(12, (3, 4)), _payload(2))
    assert store.load(11, (1, 3)) is None                 # same hash, other tokens: not this block
    assert store.load(13, (1, 2)) is None
    (path,) = _files(tmp_path / "cold")
    assert path.stat().st_size == 10 * BLOCK
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    store.close()
    assert not path.exists()


def test_the_least_recently_used_block_gives_way(tmp_path):
    store = ColdStore(tmp_path, 3 * BLOCK, BLOCK)
    for h in (1, 2, 3):
        store.put(h, (h,), _payload(h))
    assert store.load(1, (1,)) is not None                # 1 is now the most recently used
    store.put(4, (4,), _payload(4))
    assert not store.contains(2, (2,))
    assert all(store.contains(h, (h,)) for h in (1, 3, 4))
    assert len(store) == 3 and store.evicted == 1
    assert torch.equal(store.load(4, (4,)), _payload(4))  # written into 2's slot
    assert _files(tmp_path)[0].stat().st_size == 3 * BLOCK   # bounded: the file never grows


def test_a_corrupt_slot_is_refused_and_forgotten(tmp_path):
    store = ColdStore(tmp_path, 4 * BLOCK, BLOCK)
    store.put(1, (1,), _payload(1))
    store.put(2, (2,), _payload(2))
    (path,) = _files(tmp_path)
    with path.open("r+b") as handle:                      # flip one bit of whatever slot holds block 2
        data = bytearray(handle.read())
        slot = next(i for i in range(4) if bytes(data[i * BLOCK:(i + 1) * BLOCK]) == bytes(_payload(2).numpy()))
        data[slot * BLOCK + 7] ^= 0x01
        handle.seek(0)
        handle.write(data)
    assert store.load(2, (2,)) is None
    assert store.corrupt == 1 and not store.contains(2, (2,))
    assert torch.equal(store.load(1, (1,)), _payload(1))  # its neighbour is intact


def test_swapped_slots_are_refused(tmp_path):
    store = ColdStore(tmp_path, 2 * BLOCK, BLOCK)
    store.put(1, (1,), _payload(1))
    store.put(2, (2,), _payload(2))
    (path,) = _files(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[BLOCK:] + data[:BLOCK])         # valid blocks, in each other's place
    assert store.load(1, (1,)) is None and store.load(2, (2,)) is None


@pytest.mark.parametrize("damage", ["delete", "replace", "truncate"])
def test_a_lost_file_empties_the_store_and_a_new_one_takes_over(tmp_path, damage):
    store = ColdStore(tmp_path, 4 * BLOCK, BLOCK)
    store.put(1, (1,), _payload(1))
    (path,) = _files(tmp_path)
    if damage == "delete":
        path.unlink()
    elif damage == "replace":
        path.unlink()
        path.write_bytes(bytes(4 * BLOCK))
    else:
        os.truncate(path, BLOCK // 2)                     # reading the mapping past EOF would crash
    assert store.load(1, (1,)) is None
    assert store.file_lost == 1 and len(store) == 0
    store.put(5, (5,), _payload(5))
    assert torch.equal(store.load(5, (5,)), _payload(5))
    if damage == "replace":
        assert path.exists()                              # someone else's file is left alone
    store.close()


def test_the_file_goes_away_with_the_store(tmp_path):
    store = ColdStore(tmp_path, 2 * BLOCK, BLOCK)
    assert _files(tmp_path)
    del store
    gc.collect()
    assert not _files(tmp_path)


def test_files_left_by_dead_processes_of_this_host_are_removed_at_start(tmp_path):
    import subprocess
    import sys

    from engine.kv_cold import _PREFIX

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    stale = tmp_path / f"{_PREFIX}{dead_pid}-0000.bin"
    live = tmp_path / f"{_PREFIX}{os.getpid()}-1111.bin"             # a running process: kept
    other_host = tmp_path / f"kv-cold-elsewhere-{dead_pid}-2222.bin"  # another host's: not ours to judge
    for path in (stale, live, other_host):
        path.write_bytes(b"x")
    store = ColdStore(tmp_path, 2 * BLOCK, BLOCK)
    assert not stale.exists() and live.exists() and other_host.exists()
    store.close()


def test_unusable_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot hold one KV block"):
        ColdStore(tmp_path, BLOCK - 1, BLOCK)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with pytest.raises(ValueError, match="cannot create the cold file"):
        ColdStore(blocker / "cold", 4 * BLOCK, BLOCK)


# ---- the engine with a cold tier -----------------------------------------------------------------


def _prompt(length: int, seed: int) -> list[int]:
    return torch.randint(5, 450, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


PREFIX = _prompt(160, seed=1)
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def _engine(path: Path, dtype: str, strategy: str, cold_dir: Path) -> LLMEngine:
    # a pool of about 2 x 200 tokens: two other prompts evict the prefix
    blocks = {"auto": dict(num_kv_blocks=24), "int8": dict(num_kv_blocks=12), "int4": dict(num_kv_blocks=12)}
    return LLMEngine.from_pretrained(path, EngineConfig(
        kv_cache_dtype=dtype, kv_cache_strategy=strategy, kv_cache_cold_dir=str(cold_dir), max_num_seqs=2,
        **blocks[dtype]))


def _evict_prefix(engine: LLMEngine) -> None:
    engine.generate([PREFIX + [3]], GREEDY)
    for seed in (2, 3):
        engine.generate([_prompt(200, seed)], GREEDY)
    assert not engine.block_manager.find_cached_prefix(engine.prepare_request("probe", PREFIX + [4]))


@pytest.mark.parametrize("dtype", ["auto", "int8", "int4"])
def test_an_evicted_prefix_comes_back_from_the_cold_tier(tiny_llama, tmp_path, dtype):
    expected = _engine(tiny_llama, dtype, "static", tmp_path).generate([PREFIX + [9, 9]], GREEDY)[0]
    engine = _engine(tiny_llama, dtype, "tiered", tmp_path / "cold")
    _evict_prefix(engine)
    assert engine.stats()["kv_cache_cold_stored_blocks"] > 0
    out = engine.generate([PREFIX + [9, 9]], GREEDY)[0]
    stats = engine.stats()
    block = engine.block_manager.block_size
    assert out.stats.num_cached_tokens == len(PREFIX) // block * block   # every full prefix block
    assert stats["kv_cache_cold_restored_blocks"] == stats["kv_cache_cold_hit_blocks"] > 0
    assert out.token_ids == expected.token_ids                           # the same KV as recomputing


@pytest.mark.parametrize("dtype", ["auto", "int4"])
def test_a_corrupt_cold_file_falls_back_to_recompute(tiny_llama, tmp_path, dtype):
    expected = _engine(tiny_llama, dtype, "static", tmp_path).generate([PREFIX + [9, 9]], GREEDY)[0]
    engine = _engine(tiny_llama, dtype, "tiered", tmp_path / "cold")
    _evict_prefix(engine)
    (path,) = _files(tmp_path / "cold")
    size = path.stat().st_size
    with path.open("r+b") as handle:                        # garbage over every slot, same size
        handle.write(os.urandom(size))
    out = engine.generate([PREFIX + [9, 9]], GREEDY)[0]
    stats = engine.stats()
    assert out.stats.num_cached_tokens == 0
    assert stats["kv_cache_cold_corrupt_blocks"] >= 1 and stats["kv_cache_cold_restored_blocks"] == 0
    assert out.token_ids == expected.token_ids


def test_a_deleted_cold_file_falls_back_to_recompute(tiny_llama, tmp_path):
    expected = _engine(tiny_llama, "int8", "static", tmp_path).generate([PREFIX + [9, 9]], GREEDY)[0]
    engine = _engine(tiny_llama, "int8", "tiered", tmp_path / "cold")
    _evict_prefix(engine)
    for path in _files(tmp_path / "cold"):
        path.unlink()
    out = engine.generate([PREFIX + [9, 9]], GREEDY)[0]
    assert out.stats.num_cached_tokens == 0
    assert engine.stats()["kv_cache_cold_file_lost"] == 1
    assert out.token_ids == expected.token_ids
    assert _files(tmp_path / "cold")                        # a fresh file serves later evictions


def test_salted_prefixes_stay_apart_in_the_cold_tier(tiny_llama, tmp_path):
    engine = _engine(tiny_llama, "int8", "tiered", tmp_path / "cold")
    engine.add_request("a", PREFIX + [3], GREEDY, cache_salt="tenant-a")
    while engine.has_unfinished():
        engine.step()
    for seed in (2, 3):
        engine.generate([_prompt(200, seed)], GREEDY)
    cached = {}
    for request_id, salt in (("b", "tenant-b"), ("a2", "tenant-a")):
        engine.add_request(request_id, PREFIX + [3], GREEDY, cache_salt=salt)
        while engine.has_unfinished():
            for out in engine.step():
                cached[out.request_id] = out.stats.num_cached_tokens
    assert cached["b"] == 0            # another tenant's blocks, on disk or not, are never found
    assert cached["a2"] == 160         # the owner's are, from the cold tier
    assert engine.stats()["kv_cache_cold_hit_blocks"] == 5
