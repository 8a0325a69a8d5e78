"""ByteBoundedMemo: bounded by the bytes its entries hold, oldest dropped first."""

from __future__ import annotations

import numpy as np

from knowledge_graphs.decoding.guard_records import (
    _ARRAY_FIELDS,
    RECORDS_OBJECT_BYTES,
    Records,
    records_bytes,
)
from knowledge_graphs.decoding.memo import ARRAY_OVERHEAD, ByteBoundedMemo, arrays_bytes


def test_the_oldest_entries_go_first_once_the_budget_is_spent() -> None:
    memo: ByteBoundedMemo[str, int] = ByteBoundedMemo(300, lambda size: size, entry_bytes=0)
    for key, size in (("a", 100), ("b", 100), ("c", 100)):
        memo.put(key, size)
    assert len(memo) == 3 and memo.bytes == 300
    memo.put("d", 150)
    assert "a" not in memo and "b" not in memo and memo.get("c") == 100 and memo.get("d") == 150
    assert memo.bytes == 250


def test_replacing_a_key_counts_its_new_size_not_both() -> None:
    memo: ByteBoundedMemo[str, int] = ByteBoundedMemo(1000, lambda size: size, entry_bytes=10)
    memo.put("a", 100)
    memo.put("a", 300)
    assert len(memo) == 1 and memo.bytes == 310


def test_one_entry_larger_than_the_budget_is_still_kept_alone() -> None:
    memo: ByteBoundedMemo[str, int] = ByteBoundedMemo(50, lambda size: size, entry_bytes=0)
    memo.put("a", 10)
    assert memo.put("big", 500) == 500
    assert len(memo) == 1 and memo.get("big") == 500
    memo.clear()
    assert len(memo) == 0 and memo.bytes == 0


def test_array_bytes_count_data_once_and_views_by_their_objects() -> None:
    owner = np.zeros(1000, dtype=np.int64)
    assert arrays_bytes(owner) == ARRAY_OVERHEAD + 8000
    assert arrays_bytes(owner[:10]) == ARRAY_OVERHEAD


def test_walk_records_count_the_arrays_their_columns_view() -> None:
    """A walk record's columns are views of two arrays it alone keeps alive: the memo's budget must see them."""
    exact = np.zeros((100, 7), dtype=np.int64)
    close = np.zeros((50, 8), dtype=np.int64)
    columns = {name: (exact if name.startswith("exact_") else close)[:, i % 7] for i, name in enumerate(_ARRAY_FIELDS)}
    record = Records(**columns, exact_names=0, exact_words=0, close_names=0)
    assert records_bytes(record) == RECORDS_OBJECT_BYTES + len(_ARRAY_FIELDS) * ARRAY_OVERHEAD + 5600 + 3200


def test_writers_racing_to_evict_keep_the_count_exact_and_raise_nothing() -> None:
    """The engine core's step thread and input thread both put: eviction under a tiny budget, from four threads
    with a switch after almost every bytecode, never deletes one entry twice nor loses bytes."""
    import sys
    import threading

    memo: ByteBoundedMemo[tuple[int, int], int] = ByteBoundedMemo(50, lambda size: size, entry_bytes=0)
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            for i in range(3000):
                memo.put((worker, i), 1 + i % 7)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    assert memo.bytes == sum(1 + key[1] % 7 for key in memo._entries) <= 50
    assert set(memo._sizes) == set(memo._entries)


def test_a_memo_pickles_without_its_lock_and_takes_writes_after() -> None:
    import pickle

    memo: ByteBoundedMemo[str, int] = ByteBoundedMemo(1000, abs, entry_bytes=0)   # a picklable size_of
    memo.put("a", 100)
    copy = pickle.loads(pickle.dumps(memo))
    copy.put("b", 200)
    assert copy.get("a") == 100 and copy.bytes == 300 and memo.bytes == 100
