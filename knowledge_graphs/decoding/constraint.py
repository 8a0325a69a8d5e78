"""KG-constrained decoding: the allowed entity set and the engine logits processor "kg_constraint".

Two layers, AND-ed into one packed bitmask per (decoding state, allowed set), cached:

1. Steering (token tries, GENRE-style; `knowledge_graphs.decoding.trie`). A mention starts when a token is
   the first word token of some entity encoding, at a word boundary. While the mention is live (on
   the way to an allowed entity), a token that only lengthens the current word (no word boundary in
   it) is blocked when the word is then a prefix of forbidden names alone, at least
   MIN_DEAD_WORD_CHARS characters into one (" Met" + "op" toward a forbidden "Metoprolol"). A token
   after which the word is no prefix of any constrained form ends the mention and is allowed ("JP" +
   "Y": "JPY" is no name, whatever "JPN" is), and so is every token holding a word boundary ("U.S"
   + "."): whether a name closes there is the guard's business. The mention's own live
   continuations are always offered, even a single-token name the root rule would block (" Ohio" in
   "Brandenburg v. Ohio"). Outside a mention, a token that by itself spells a complete forbidden
   name with no allowed continuation is blocked, and so is a token that continues an open match and
   ends exactly on such a name ("Heli" + "um"). Closing is always offered: " The" (toward
   "Theophylline") is usually just a word.
2. Guarantee (character guard; `knowledge_graphs.decoding.surface_guard`, applied to the whole vocabulary
   per state by `knowledge_graphs.decoding.vocab_guard`). Whatever the tokens, no token
   and no EOS may leave a forbidden surface form linked in the normalised text: closing one at a
   word boundary is blocked unless a longer allowed name covers it, either closing at the same
   boundary ("diabetes" in "type 2 diabetes") or still being written ("Nicotine" in "Nicotine
   dependence", "Heart failure" in "Heart failure, NYHA class III or IV"). In the second case the
   text owes that longer name (an obligation, `surface_guard.advance_checked`): until an allowed
   name covering it closes, only tokens on the way to one are allowed (with at most MAX_IDLE
   boundary-only tokens in a row), and EOS is blocked.

Guarantee: for any logits, exact alias linking of the generated text (`EntityLinker` restricted to
the constrained types, with its default min_chars=MIN_FORM_CHARS=3: 1-2 character aliases such as
"he" for Helium are neither linked nor constrained, else ordinary words would be forbidden) finds no mention whose
entities are all outside the allowed set. It holds for any tokenisation of a name (non-canonical splits, merges across the space), any case mix,
a mention started after punctuation or at the start of the output, names that are prefixes of
other names, names that are suffixes of longer allowed names ("diabetes" inside an allowed
"type 2 diabetes"), and names that begin or sit inside longer allowed names being written.
Limits:
- The text must end by EOS (or a stop string starting with a non-alphanumeric character): a
  generation cut by max_tokens may end right on a forbidden name, e.g. one that an allowed name
  continues, or one spelt whole by a single non-canonical token.
- A forbidden name let through on an obligation forces the text on toward the longer allowed name:
  a model that meant "Nicotine." as a sentence end must go on with "dependence" (or punctuation,
  MAX_IDLE tokens at most). Such a text cut by max_tokens before the longer name is complete
  leaves the forbidden name linked (the EOS limit above).
- A forbidden name that starts inside one token (after a boundary in it) and closes inside the same
  token is blocked even when a longer allowed name would cover it (static, conservative check).
- Longest-match chains: if an allowed name A covers a forbidden name F, and a longer allowed name
  overlaps A but not F, the linker keeps the longer name, drops A and reports F; the guard does
  not model this chain.
- A non-ASCII character split over several byte-level tokens is seen by the mask of the token that
  completes it as a boundary; the state after it is exact, so a forbidden name is still caught when
  it closes, unless the completing token itself also holds the rest of the name and a boundary.
- Ambiguous surface forms: a form shared by an allowed and a forbidden entity is allowed (the
  linker's `candidate_ids` then contains an allowed reading).
If both layers together leave no token, the steering is dropped for that step (never the guard); if
the guard alone leaves none, the engine ends the request with "constraint_dead_end".
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from engine.kernels.dispatch import apply_token_bitmask
from engine.outputs import ProcessorEvent
from engine.processors.logits_process import LogitsProcessor
from engine.sampling_params import InvalidRequestError, SamplingParams
from knowledge_graphs.decoding.constraint_masks import (
    AllowedView,
    CacheLimits,
    DecodeState,
    DomainMasks,
    compile_domain,
)
from knowledge_graphs.decoding.index_cache import cache_key, load_or_compile
from knowledge_graphs.decoding.surface_guard import GuardState, fold
from knowledge_graphs.decoding.vocab_guard import SortedVocabulary
from knowledge_graphs.decoding.vocab_text import token_bytes
from knowledge_graphs.model import KgOutline, KnowledgeGraph
from knowledge_graphs.neighbourhood import DOMAIN_DEFAULTS, DomainDefaults, allowed_entities  # noqa: F401 - re-exported


class KGConstraintError(InvalidRequestError):
    """Unusable `extra_args["kg_constraint"]` (unknown domain, malformed or unknown entity ids)."""


def _is_complete_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@dataclass(slots=True)
class _Request:
    view: AllowedView
    state: DecodeState
    decoder: codecs.IncrementalDecoder
    position: int = 0                        # index of the next generated token
    pending: bool = False                    # the decoder holds part of a UTF-8 character
    blocked: int | None = None   # the model's favourite token this step, if the mask removed it
    events: list[ProcessorEvent] = field(default_factory=list)


class KGConstraintProcessor(LogitsProcessor):
    """Masks entity mentions to the request's allowed set. Register each domain's KG once."""

    name = "kg_constraint"

    def __init__(
        self, tokenizer: Tokenizer | Any, *, vocab_size: int, eos_token_ids: Iterable[int],
        kgs: Mapping[str, KnowledgeGraph] | None = None, types: Mapping[str, Collection[str]] | None = None,
        limits: CacheLimits | None = None, index_cache_dir: Path | None = None,
    ) -> None:
        """index_cache_dir: where compiled domain indices are kept between starts (None: compile every time)."""
        self.limits = limits or CacheLimits()
        self.index_cache_dir = index_cache_dir
        # accept engine.tokenizer.Tokenizer (which wraps a `tokenizers` backend) as well
        self.tokenizer: Tokenizer = getattr(tokenizer, "backend", tokenizer)
        self.vocab_size = vocab_size
        self.eos_token_ids = frozenset(eos_token_ids)
        self.token_bytes = token_bytes(self.tokenizer, vocab_size)
        self.token_texts = [b.decode("utf-8", errors="replace") for b in self.token_bytes]
        self.vocabulary = SortedVocabulary(self.token_texts)   # folded once, sorted once: for every domain
        self.token_folded = self.vocabulary.folded
        self.token_complete = [_is_complete_utf8(b) for b in self.token_bytes]
        self.domains: dict[str, DomainMasks] = {}
        self._requests: dict[str, _Request] = {}
        for domain, kg in (kgs or {}).items():
            self.register(kg, (types or {}).get(domain), domain=domain)

    def register(self, kg: KnowledgeGraph, types: Collection[str] | None = None, *, domain: str | None = None) -> None:
        """Compile `kg` (entities of `types`, default DOMAIN_DEFAULTS) for requests naming `domain`."""
        self.register_outline(KgOutline.of(kg), lambda: kg, types, domain=domain)

    def register_outline(self, outline: KgOutline, load: Callable[[], KnowledgeGraph],
                         types: Collection[str] | None = None, *, domain: str | None = None) -> None:
        """`register` from the KG's outline: `load()` reads the whole KG only when the index is not on disk."""
        domain = domain or outline.domain
        if types is None:
            if outline.domain not in DOMAIN_DEFAULTS:
                raise ValueError(f"no default constrained types for domain {outline.domain!r}: pass types=")
            types = DOMAIN_DEFAULTS[outline.domain].types
        has_word_chars = [f.strip() != "" for f in self.token_folded]
        key = cache_key(outline, types, self.tokenizer, self.vocab_size)
        compiled = load_or_compile(self.index_cache_dir, domain, key, lambda: compile_domain(
            load(), frozenset(types), self.tokenizer, self.token_texts, has_word_chars, self.vocabulary))
        self.domains[domain] = DomainMasks(outline, types, self.tokenizer, self.token_texts, self.eos_token_ids,
                                            self.limits, compiled, self.vocabulary)

    # -- protocol -------------------------------------------------------------------------------
    def stats(self) -> dict[str, float | dict[str, float]]:
        """Per domain, what its caches hold against their budget: bounded caches fill toward the budget under
        traffic that keeps reaching new states, which reads as a slow RSS climb that is not a leak."""
        domains = self.domains.items()
        return {"kg_constraint_views": {name: masks.cached_views for name, masks in domains},
                "kg_constraint_view_bytes": {name: masks.cached_view_bytes for name, masks in domains},
                "kg_constraint_memo_bytes": {name: masks.memo_bytes for name, masks in domains},
                "kg_constraint_budget_bytes": {name: masks.budget_bytes for name, masks in domains}}

    def validate_params(self, params: SamplingParams) -> None:
        self._parse(params)

    def prepare(self, params: SamplingParams) -> None:
        """Build the request's allowed-set view before admission (12-18 ms for a new set on the demo KGs),
        so the step that admits it finds it cached instead of stalling the whole batch."""
        parsed = self._parse(params)
        if parsed is not None:
            domain, ids = parsed
            domain.view(ids)

    def _parse(self, params: SamplingParams) -> tuple[DomainMasks, list[str]] | None:
        args = params.extra_args.get(self.name)
        if args is None:
            return None
        if not isinstance(args, Mapping):
            raise KGConstraintError("kg_constraint must be an object with 'domain' and 'allowed_entity_ids'")
        domain = args.get("domain")
        if domain not in self.domains:
            raise KGConstraintError(f"kg_constraint.domain must be one of {sorted(self.domains)}, got {domain!r}")
        ids = args.get("allowed_entity_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise KGConstraintError("kg_constraint.allowed_entity_ids must be a list of entity id strings")
        known = self.domains[domain].known_entity_ids
        unknown = [i for i in ids if i not in known]
        if unknown:
            if args.get("kg_version") in (None, self.domains[domain].kg_version):
                raise KGConstraintError(f"kg_constraint.allowed_entity_ids not in the {domain} KG: {unknown[:5]}")
            # Linked under another KG version (an import this process has not compiled yet): entities it does
            # not hold are neither allowed nor forbidden here, so dropping them from the allowed set is safe.
            ids = [i for i in ids if i in known]
        return self.domains[domain], ids

    def add_request(self, request_id: str, params: SamplingParams, prompt_token_ids: Sequence[int],
                    output_token_ids: Sequence[int]) -> bool:
        parsed = self._parse(params)
        if parsed is None:
            return False
        domain, ids = parsed
        request = _Request(domain.view(ids), DecodeState(None, GuardState()),
                           codecs.getincrementaldecoder("utf-8")(errors="replace"))
        self._requests[request_id] = request
        for token_id in output_token_ids:  # a preempted request comes back: replay its state
            self._advance(request, token_id)
        return True

    def remove_request(self, request_id: str) -> None:
        self._requests.pop(request_id, None)

    def apply(self, logits: torch.Tensor, request_ids: Sequence[str | None]) -> None:
        vocab = self.vocab_size
        dense_rows: list[int] = []
        dense_masks: list[torch.Tensor] = []
        sparse_rows: list[int] = []
        sparse_ids: list[torch.Tensor] = []
        for row, request_id in enumerate(request_ids):
            request = self._requests.get(request_id) if request_id is not None else None
            if request is None:
                continue
            entry = request.view.entry(request.state)
            if entry.blocked_ids is not None and logits.is_contiguous():
                sparse_rows.append(row)
                sparse_ids.append(entry.blocked_ids)
            else:
                dense_rows.append(row)
                dense_masks.append(entry.packed)
        if not dense_rows and not sparse_rows:
            return
        # An intervention is a step where the model's own favourite token is masked out. Finding it
        # costs one pass over each constrained row and none over the others: the row max for sparse
        # rows (a blocked id that reaches it was the favourite), the argmax for dense ones (is its
        # bit clear?). Rows the mask empties show up in the sampler's own max (`dead_rows`).
        dropped: list[tuple[int, int]] = []                                               # (row, favourite)
        if sparse_rows:
            dropped += self._apply_sparse(logits, sparse_rows, sparse_ids)
        if dense_rows:
            dropped += self._apply_dense(logits, dense_rows, dense_masks)
        if logits.shape[-1] > vocab:  # ids past the vocabulary never write a mention
            rows = torch.tensor(sparse_rows + dense_rows, dtype=torch.long, device=logits.device)
            logits[rows, vocab:] = float("-inf")
        for row, token_id in dropped:   # explained once the step's token is known (`accept_token`)
            self._requests[request_ids[row]].blocked = token_id  # type: ignore[index]

    def _apply_sparse(self, logits: torch.Tensor, rows: list[int], blocked_ids: list[torch.Tensor],
                      ) -> list[tuple[int, int]]:
        """Rows whose mask blocks few tokens: set those logits to -inf through one flat index."""
        device = logits.device
        width = logits.shape[-1]
        best = _row_reduce(logits[:, : self.vocab_size], rows, "amax")                     # [k]
        counts = [ids.numel() for ids in blocked_ids]
        # numpy's repeat: torch.repeat_interleave costs ~100 us on CPU for this small job
        local = torch.from_numpy(np.repeat(np.arange(len(rows), dtype=np.int64), counts)).to(device)   # [n] into rows
        row_of = torch.from_numpy(np.repeat(np.asarray(rows, dtype=np.int64), counts)).to(device)     # [n]
        ids = torch.cat(blocked_ids).to(device)                                           # [n]
        flat = row_of * width + ids                                                       # [n] into logits.view(-1)
        values = logits.view(-1).index_select(0, flat)                                    # [n]
        hit = (values >= best.index_select(0, local)).nonzero().flatten().tolist()        # favourite blocked
        dropped = {int(row_of[i]): int(ids[i]) for i in hit}
        logits.view(-1).index_fill_(0, flat, float("-inf"))
        return list(dropped.items())

    def _apply_dense(self, logits: torch.Tensor, rows: list[int], masks: list[torch.Tensor]) -> list[tuple[int, int]]:
        """Rows with a mostly-closed mask: the packed-bitmask kernel."""
        vocab = self.vocab_size
        row_index = None if len(rows) == logits.shape[0] else torch.tensor(rows, dtype=torch.long, device=logits.device)
        bitmask = torch.stack(masks).to(logits.device)                                    # [k, words] int32
        favourite = _row_reduce(logits[:, :vocab], rows, "argmax")                        # [k]
        # bit (t % 32) of word (t // 32) set <=> token t allowed; >> on int32 keeps the sign, & 1 reads the bit
        word = bitmask.gather(1, (favourite // 32)[:, None]).squeeze(1)                   # [k]
        lost = (((word >> (favourite % 32).to(torch.int32)) & 1) == 0).nonzero().flatten().tolist()
        apply_token_bitmask(logits[:, :vocab], bitmask, row_index)  # a view: masks in place
        return [(rows[k], int(favourite[k])) for k in lost]

    def accept_token(self, request_id: str, token_id: int) -> None:
        request = self._requests.get(request_id)
        if request is None:
            return
        favourite, request.blocked = request.blocked, None
        if favourite is None:
            self._advance(request, token_id)
            return
        position = request.position
        # the state the mask was made for, before this step's token moves it on
        blocked_ids = request.view.explain(request.state, favourite, self.token_texts[favourite])
        self._advance(request, token_id)
        request.events.append(ProcessorEvent(
            self.name, position, "blocked",
            {"blocked_entity_ids": blocked_ids, "chosen_entity_id": request.view.chosen(request.state)},
        ))

    def _advance(self, request: _Request, token_id: int) -> None:
        if not 0 <= token_id < self.vocab_size:
            request.state = request.view.next_state(request.state, token_id, "", memo=False)
        elif request.pending or not self.token_complete[token_id]:
            # a UTF-8 character split over tokens: decode incrementally, exactly as the text will read
            text = request.decoder.decode(self.token_bytes[token_id])
            request.pending = bool(request.decoder.getstate()[0])
            request.state = request.view.next_state(request.state, token_id, fold(text), memo=False)
        else:  # the common case: the token's own text, folded once at start-up
            request.state = request.view.next_state(request.state, token_id, self.token_folded[token_id])
        request.position += 1

    def pop_events(self, request_id: str) -> list[ProcessorEvent]:
        request = self._requests.get(request_id)
        if request is None or not request.events:
            return []
        events, request.events = request.events, []
        return events


def _row_reduce(logits: torch.Tensor, rows: list[int], how: str) -> torch.Tensor:
    """Per listed row, its max ("amax") or the index of its first max ("argmax"): one pass over those
    rows only (all rows: one batched reduction; some: row by row, as a gather would copy them first)."""
    def reduce(x: torch.Tensor) -> torch.Tensor:
        # max(dim).indices, not argmax: the same first-maximum rule, several times faster on CPU
        return x.amax(-1) if how == "amax" else x.max(dim=-1).indices

    if len(rows) == logits.shape[0]:
        return reduce(logits)
    return torch.stack([reduce(logits[row]) for row in rows])
