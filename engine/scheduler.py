"""Continuous batching: which sequences run this step, and how many of their tokens.

Each step fills a token budget: running decodes first (one token each), then running prompts
still being prefilled, then waiting requests admitted in priority order (chunked to the budget).
Priority = the intent's class minus one class per `aging_seconds` waited, so low priority never
starves. When the KV pool runs out, the least urgent, newest running sequence is preempted and
recomputed later (its blocks freed; prefix caching usually gives most of them back).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledBatch:
    """Decodes first (one token each), then prefill chunks; `num_new_tokens[i]` belongs to seqs[i]."""

    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    num_decodes: int = 0
    admitted: list[Sequence] = field(default_factory=list)    # entered the running batch this step
    preempted: list[Sequence] = field(default_factory=list)   # left it this step (back to waiting)

    @property
    def is_empty(self) -> bool:
        return not self.seqs


class Scheduler:
    def __init__(
        self, config: EngineConfig, block_manager: BlockManager, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.block_manager = block_manager
        self.clock = clock
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def priority_of(self, intent: str | None) -> int:
        if intent is None:
            return self.config.default_priority
        return self.config.intent_priorities.get(intent, self.config.default_priority)

    def add(self, seq: Sequence) -> None:
        seq.queued_since = self.clock()
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def _urgency(self, seq: Sequence, now: float) -> tuple[float, float]:
        """Sort key, smaller = sooner: aged priority class, then queue order."""
        aged = seq.priority - (now - seq.queued_since) / self.config.aging_seconds
        return (aged, seq.queued_since)

    def schedule(self) -> ScheduledBatch:
        now = self.clock()
        batch = ScheduledBatch()
        budget = self.config.max_num_batched_tokens
        # most urgent first; preemption victims are taken from the end
        self.running.sort(key=lambda s: self._urgency(s, now))
        decodes = [s for s in self.running if s.num_uncomputed_tokens == 1]
        prefills = [s for s in self.running if s.num_uncomputed_tokens > 1]

        scheduled: set[int] = set()
        for seq in decodes:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:  # preempted while making room for another
                continue
            if not self._make_room(seq, 1, batch, scheduled):
                continue
            batch.seqs.append(seq)
            batch.num_new_tokens.append(1)
            scheduled.add(id(seq))
            budget -= 1
        batch.num_decodes = len(batch.seqs)

        for seq in prefills:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue
            chunk = min(seq.num_uncomputed_tokens, budget)
            if not self._make_room(seq, chunk, batch, scheduled):
                continue
            batch.seqs.append(seq)
            batch.num_new_tokens.append(chunk)
            scheduled.add(id(seq))
            budget -= chunk

        if not batch.preempted:  # admitting while evicting would thrash the pool
            self._admit_waiting(batch, budget, now)
        return batch

    def _admit_waiting(self, batch: ScheduledBatch, budget: int, now: float) -> None:
        self.waiting.sort(key=lambda s: self._urgency(s, now))
        admitted = 0
        for seq in self.waiting:
            if budget == 0 or len(self.running) >= self.config.max_num_seqs:
                break
            if not self.block_manager.allocate_prompt(seq, budget):
                break  # keep priority order: nobody jumps ahead of a request that does not fit yet
            chunk = min(seq.num_uncomputed_tokens, budget)
            seq.status = SequenceStatus.RUNNING
            if seq.stats.first_scheduled_time is None:
                seq.stats.first_scheduled_time = time.time()
                seq.stats.num_cached_tokens = seq.num_computed_tokens
            self.running.append(seq)
            batch.admitted.append(seq)
            batch.seqs.append(seq)
            batch.num_new_tokens.append(chunk)
            budget -= chunk
            admitted += 1
        del self.waiting[:admitted]

    def _make_room(self, seq: Sequence, num_tokens: int, batch: ScheduledBatch, scheduled: set[int]) -> bool:
        """Ensure seq has slots for num_tokens more, preempting the least urgent others if needed.

        Returns False if seq itself had to be preempted."""
        while not self.block_manager.append_slots(seq, num_tokens):
            victim = next((s for s in reversed(self.running) if id(s) not in scheduled), None)
            if victim is None or victim is seq:
                self.preempt(seq, batch)
                return False
            self.preempt(victim, batch)
        return True

    def preempt(self, seq: Sequence, batch: ScheduledBatch | None = None) -> None:
        """Free seq's blocks and send it back to the waiting queue to be recomputed."""
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.stats.num_preemptions += 1
        self.num_preemptions += 1
        # keeps its original queue time, so it is readmitted ahead of newer work of its class
        self.waiting.append(seq)
        if batch is not None:
            batch.preempted.append(seq)

    def finish(self, seq: Sequence) -> None:
        """Remove a finished or aborted sequence and free its blocks at once."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING and seq in self.waiting:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
