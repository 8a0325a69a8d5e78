"""Batched sampling: penalties, temperature, top-k / top-p / min-p, seeded draws, logprobs.

The cost grows with the vocabulary V as a few vectorised passes per row, and nothing sorts it:
- greedy rows: one max;
- sampled rows: max, shift and scale, exp, then an inverse-CDF draw (`draw`) from one uniform per row;
- top-k (torch.topk), min-p (one compare) and top-p (rejection, `_accept_top_p`) run only on the rows
  that ask for them;
- logprobs: log_softmax over the rows that ask for them only.
Rows with a `seed` draw their uniform from their own torch.Generator, so their output does not depend
on what else is in the batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

# Inverse-CDF block width: block sums are one vectorised pass, then a cumulative sum runs over one
# block per row instead of the whole vocabulary (a 152k-long cumsum is a slow sequential scan on CPU).
BLOCK = 256
# On CPU, rows are sampled a few at a time, as many as fit in this much cache (one 152k-wide fp32 row).
CACHE_BYTES = 1 << 20

# Sampling weights are exp(scaled logit - best). A token more than e^86 times less likely than the best
# gets weight 0 (a masked token, at -inf, among them): such masses are below fp32's resolution of a
# row's total anyway, so no draw could tell them apart from 0.
EXP_FLOOR = -87.0
NEGLIGIBLE_WEIGHT = math.exp(-86.0)

Logprobs = tuple[float, list[tuple[int, float]]]


@dataclass(slots=True)
class SamplerOutput:
    token_ids: list[int]
    # per row: (sampled token logprob, [(token_id, logprob), ...] best first) or None when not asked
    logprobs: list[Logprobs | None]
    # rows whose logits were all -inf (processors left no token): their token_ids entry means nothing
    dead_rows: set[int] = field(default_factory=set)


class Sampler:
    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator  # for rows without their own seed

    @torch.inference_mode()
    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> SamplerOutput:
        """logits fp32 [M, vocab] (modified in place); seqs[i] owns row i."""
        params = [s.params for s in seqs]
        self._apply_penalties(logits, seqs)
        # logprobs describe the model after penalties, before temperature and filters (as before)
        logprob_rows = [i for i, p in enumerate(params) if p.logprobs is not None]
        logprobs = torch.log_softmax(_rows(logits, logprob_rows), dim=-1) if logprob_rows else None

        token_ids = [0] * len(seqs)
        alive = [True] * len(seqs)
        greedy_rows = [i for i, p in enumerate(params) if p.temperature == 0]
        sampled_rows = [i for i, p in enumerate(params) if p.temperature != 0]
        if greedy_rows:
            best, found = _greedy(_rows(logits, greedy_rows))
            _scatter(token_ids, greedy_rows, best)
            _scatter(alive, greedy_rows, found)
        if sampled_rows:
            # all rows sampling: `_rows` returns logits itself and the sampling edits it in place
            tokens, ok = self._sample(_rows(logits, sampled_rows), [seqs[i] for i in sampled_rows])
            _scatter(token_ids, sampled_rows, tokens.tolist())
            _scatter(alive, sampled_rows, ok.tolist())
        out_logprobs: list[Logprobs | None] = [None] * len(seqs)
        if logprobs is not None:
            picked = torch.tensor([token_ids[i] for i in logprob_rows], device=logits.device)
            _scatter(out_logprobs, logprob_rows, _gather_logprobs(logprobs, picked, [params[i] for i in logprob_rows]))
        return SamplerOutput(token_ids, out_logprobs, {i for i, ok in enumerate(alive) if not ok})

    def _sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> tuple[torch.Tensor, torch.Tensor]:
        """One draw per row of [R, vocab] logits (edited in place into sampling weights): (token ids [R],
        row has a finite logit [R]). On CPU the rows go through their passes a few at a time, so that
        every pass after the first reads the rows from cache (a 152k-wide fp32 row is 0.6 MB)."""
        params = [s.params for s in seqs]
        rows, vocab = logits.shape
        step = rows if logits.is_cuda else max(1, CACHE_BYTES // (vocab * logits.element_size()))
        temps = torch.tensor([p.temperature for p in params], device=logits.device)[:, None]
        alive = torch.empty(rows, 1, dtype=torch.bool, device=logits.device)
        sums = torch.empty(rows, -(-vocab // BLOCK), dtype=logits.dtype, device=logits.device)
        top_p_totals: dict[int, float] = {}
        for start in range(0, rows, step):
            end = min(rows, start + step)
            part = logits[start:end]                                                  # a view: edited in place
            best = part.amax(dim=-1, keepdim=True)                                    # [r, 1]
            alive[start:end] = best > float("-inf")                                   # NaN rows count as dead
            # shifted so each row's best is 0, then scaled: softmax-invariant, and exp() cannot overflow
            part.sub_(torch.where(alive[start:end], best, 0.0))
            if any(params[row].temperature != 1.0 for row in range(start, end)):
                part.div_(temps[start:end])
            for row in range(start, end):
                if 0 < params[row].top_k < vocab:
                    _keep_top_k(logits[row], params[row].top_k)
            # exp() of an input below about -87 (a denormal or zero result, -inf included) takes a slow
            # path, 5-60x slower than the rest: clamp first, then zero everything that far below the best
            part.clamp_(min=EXP_FLOOR).exp_()                                         # weights, best = 1
            F.threshold_(part, NEGLIGIBLE_WEIGHT, 0.0)
            for row in range(start, end):
                p = params[row]
                if p.top_p < 1.0:  # top-p renormalises over what top-k left, before min-p (the sort's order)
                    top_p_totals[row] = float(logits[row].sum())
                if p.min_p > 0:    # drop p_i < min_p * p_max (p_max is 1 here): keep w > the float below min_p
                    F.threshold_(logits[row], _float_below(p.min_p, logits.dtype), 0.0)
            sums[start:end] = block_sums(part)
        weights = logits
        tokens = draw(weights, self._uniforms(seqs, logits.device), sums)
        for row, total in top_p_totals.items():
            if alive[row]:
                tokens[row] = self._accept_top_p(weights[row], int(tokens[row]), params[row].top_p * total, seqs[row])
        return tokens, alive.squeeze(1)

    def _accept_top_p(self, weights: torch.Tensor, token: int, mass_limit: float, seq: Sequence) -> int:
        """Top-p without sorting (rejection, as FlashInfer samples): `token` was drawn from `weights`
        (one row, edited in place). It is in the nucleus iff the weight of the tokens strictly heavier
        than it is below `mass_limit` (top_p x the row's total). If not, neither is any token as light
        as it: zero them all and draw again. The nucleus is never touched, so the accepted token is a
        draw from the nucleus, renormalised. Each round removes at least the rejected token, and the
        best token is always accepted; rounds are few (one when the nucleus holds most of the mass).
        On ties: a token as heavy as the nucleus' lightest stays (a sort would keep only some of them)."""
        generator = seq.generator or self.generator
        while True:
            weight = float(weights[token])
            # threshold(x, t, 0) keeps x > t: one fused pass (a boolean mask costs several)
            if float(F.threshold(weights, weight, 0.0).sum()) < mass_limit:
                return token
            F.threshold_(weights, weight, 0.0)
            uniform = torch.empty(1, dtype=torch.float64, device=weights.device).uniform_(generator=generator)
            token = int(draw(weights[None], uniform)[0])

    def _uniforms(self, seqs: list[Sequence], device: torch.device) -> torch.Tensor:
        """One U[0, 1) per row, float64 so that even a 152k vocabulary's smallest masses are reachable."""
        uniforms = torch.empty(len(seqs), dtype=torch.float64, device=device)
        seeded = [i for i, s in enumerate(seqs) if s.generator is not None]
        if len(seeded) < len(seqs):
            uniforms.uniform_(generator=self.generator)
        for i in seeded:  # one draw per seeded row from its own generator: batch-independent
            uniforms[i : i + 1].uniform_(generator=seqs[i].generator)
        return uniforms

    def _apply_penalties(self, logits: torch.Tensor, seqs: list[Sequence]) -> None:
        vocab = logits.shape[1]
        rep_rows = [i for i, s in enumerate(seqs) if s.params.repetition_penalty != 1.0]
        if rep_rows:
            # HF semantics: every token seen in prompt or output, positive logits / p, negative * p
            row_idx = [r for r in rep_rows for _ in seqs[r].all_token_ids()]
            tok_idx = [t for r in rep_rows for t in seqs[r].all_token_ids()]
            seen = torch.zeros(len(rep_rows), vocab, dtype=torch.bool, device=logits.device)
            local = {r: i for i, r in enumerate(rep_rows)}
            seen[torch.tensor([local[r] for r in row_idx], dtype=torch.long, device=logits.device),
                 torch.tensor(tok_idx, dtype=torch.long, device=logits.device)] = True
            penalty = torch.tensor([seqs[r].params.repetition_penalty for r in rep_rows], device=logits.device)[:, None]
            index = torch.tensor(rep_rows, device=logits.device)
            sub = logits[index]
            penalised = torch.where(sub > 0, sub / penalty, sub * penalty)
            logits[index] = torch.where(seen, penalised, sub)
        pf_rows = [
            i for i, s in enumerate(seqs)
            if (s.params.presence_penalty or s.params.frequency_penalty) and s.output_token_ids
        ]
        if pf_rows:
            # OpenAI semantics over generated tokens: logit -= freq * count + presence * (count > 0)
            device = logits.device
            counts = torch.zeros(len(pf_rows), vocab, device=device)
            row_idx = torch.tensor([i for i, r in enumerate(pf_rows) for _ in seqs[r].output_token_ids], device=device)
            tok_idx = torch.tensor([t for r in pf_rows for t in seqs[r].output_token_ids], device=device)
            counts.index_put_((row_idx, tok_idx), torch.ones(len(tok_idx), device=device), accumulate=True)
            freq = torch.tensor([seqs[r].params.frequency_penalty for r in pf_rows], device=device)[:, None]
            pres = torch.tensor([seqs[r].params.presence_penalty for r in pf_rows], device=device)[:, None]
            index = torch.tensor(pf_rows, device=logits.device)
            logits[index] -= freq * counts + pres * (counts > 0).float()


def block_sums(weights: torch.Tensor) -> torch.Tensor:
    """[R, V] -> [R, ceil(V / BLOCK)]: the weight of each BLOCK-wide run of token ids."""
    vocab = weights.shape[1]
    full = vocab // BLOCK
    sums = weights[:, : full * BLOCK].unflatten(1, (full, BLOCK)).sum(-1)                   # [R, full]
    if vocab % BLOCK:
        sums = torch.cat([sums, weights[:, full * BLOCK :].sum(-1, keepdim=True)], dim=1)
    return sums


def draw(weights: torch.Tensor, uniforms: torch.Tensor, sums: torch.Tensor | None = None) -> torch.Tensor:
    """Inverse-CDF sampling: per row, the token whose cumulative weight first exceeds u * total.

    weights [R, V] >= 0 (unnormalised), uniforms [R] float64 in [0, 1) -> token ids [R]; sums: their
    `block_sums`, if already known. A token of weight 0 is never drawn while its row has any positive
    weight. Two levels: the block sums locate the block, a cumulative sum inside that block alone
    locates the token.
    """
    vocab = weights.shape[1]
    device = weights.device
    cum = (block_sums(weights) if sums is None else sums).cumsum(-1, dtype=torch.float64)   # [R, blocks]
    target = (uniforms * cum[:, -1])[:, None]                                             # [R, 1]
    block = torch.searchsorted(cum, target, right=True).clamp_(max=cum.shape[1] - 1)     # [R, 1]
    before = torch.where(block > 0, cum.gather(1, (block - 1).clamp(min=0)), 0.0)         # mass of earlier blocks
    ids = block * BLOCK + torch.arange(BLOCK, device=device)                              # [R, BLOCK]
    inside = ids < vocab
    values = weights.gather(1, ids.clamp(max=vocab - 1)).masked_fill_(~inside, 0.0)       # [R, BLOCK]
    position = torch.searchsorted(values.cumsum(-1, dtype=torch.float64), target - before, right=True)
    # the block sum and the in-block cumsum round differently: past the end means its last positive weight
    last_positive = ((values > 0) * torch.arange(BLOCK, device=device)).amax(-1, keepdim=True)
    tokens = block * BLOCK + torch.minimum(position, last_positive)                        # [R, 1]
    # never hand out a weight-0 (masked) token, whatever the rounding: fall back to the row's best
    unsafe = weights.gather(1, tokens) <= 0                                                # [R, 1]
    if bool(unsafe.any()):
        tokens = torch.where(unsafe, weights.argmax(dim=-1, keepdim=True), tokens)
    return tokens.squeeze(1)


def _keep_top_k(row: torch.Tensor, k: int) -> None:
    """Set to -inf (in place) every token of one row of logits but its k best."""
    values, order = row.topk(k, sorted=False)
    row.fill_(float("-inf"))
    row.scatter_(0, order, values)


def _gather_logprobs(logprobs: torch.Tensor, tokens: torch.Tensor, params: list[SamplingParams]) -> list[Logprobs]:
    """logprobs [R, V] of the rows that asked, tokens [R] they sampled."""
    sampled = logprobs.gather(1, tokens[:, None]).squeeze(1).tolist()
    max_n = max((p.logprobs or 0) for p in params)
    top_v: list[list[float]] = [[] for _ in params]
    top_i: list[list[int]] = [[] for _ in params]
    if max_n:
        top_values, top_ids = logprobs.topk(max_n, dim=-1)
        top_v, top_i = top_values.tolist(), top_ids.tolist()
    return [
        (sampled[row], list(zip(top_i[row][: p.logprobs or 0], top_v[row][: p.logprobs or 0], strict=True)))
        for row, p in enumerate(params)
    ]


def _float_below(value: float, dtype: torch.dtype) -> float:
    """The largest `dtype` number below `value`, so that `x > result` reads `x >= value`."""
    exact = torch.tensor(value, dtype=dtype)
    return float(torch.nextafter(exact, torch.tensor(float("-inf"), dtype=dtype)))


def _greedy(logits: torch.Tensor) -> tuple[list[int], list[bool]]:
    """Per row of logits [M, vocab]: the first highest token, and whether it is above -inf (a row with nothing
    allowed is not). On CPU through numpy's argmax: the same first-maximum rule (a NaN counts as the maximum in
    both), ~7x faster than torch's max(dim) at [32, 8k] (19 against 140 us), a cost paid at every step."""
    if logits.device.type == "cpu" and logits.dtype == torch.float32:
        array = logits.numpy()
        best = array.argmax(axis=-1)
        return best.tolist(), (array[np.arange(len(best)), best] > -np.inf).tolist()
    values, indices = logits.max(dim=-1)   # max(dim), not argmax: several times faster on torch's CPU path
    return indices.tolist(), (values > float("-inf")).tolist()


def _rows(x: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """x[rows]: x itself when every row is wanted (no copy), else a copy of those rows."""
    if len(rows) == x.shape[0]:
        return x
    return x.index_select(0, torch.tensor(rows, device=x.device))


def _scatter(target: list, rows: list[int], values: list) -> None:
    for row, value in zip(rows, values, strict=True):
        target[row] = value
