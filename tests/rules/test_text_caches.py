"""The per-text memo caches: listed in one place, emptied by `clear_text_caches`, and never a verdict's cause."""

from __future__ import annotations

from benchmarks.verify_throughput import timed_batch
from rules import verify
from rules.text_caches import TEXT_CACHES, clear_text_caches

# written for this test: a citation with its year in prose, a date, numbers in words
ANSWER = ("Miranda v. Arizona, 384 U.S. 436, was decided in nineteen sixty-six. The Ninth Circuit heard the "
          "appeal on March 3, 2011, and the fine was two thousand dollars.")


def test_clearing_empties_every_listed_cache() -> None:
    verify(ANSWER, "legal")
    assert all(memo.cache_info().currsize > 0 for memo in TEXT_CACHES)
    clear_text_caches()
    assert all(memo.cache_info().currsize == 0 for memo in TEXT_CACHES)


def test_a_cleared_run_gives_the_same_report() -> None:
    clear_text_caches()
    cold = verify(ANSWER, "legal").model_dump()
    warm = verify(ANSWER, "legal").model_dump()
    assert cold == warm


def test_the_benchmark_verifies_each_answer_cold() -> None:
    """A repeated answer costs the benchmark as much as a new one: its verify call misses the text caches."""
    answers = [ANSWER, ANSWER.replace("Ninth", "Second"), ANSWER]
    misses: list[int] = []

    def before_each() -> None:
        misses.append(sum(memo.cache_info().misses for memo in TEXT_CACHES))
        clear_text_caches()

    wall, cpu = timed_batch(answers, "legal", before_each=before_each)
    misses.append(sum(memo.cache_info().misses for memo in TEXT_CACHES))
    # cache_clear resets the counters: each entry is the misses of the verify call before it
    assert misses[1] > 0 and misses[2] > 0 and misses[3] == misses[1]
    assert wall > 0 and cpu > 0
