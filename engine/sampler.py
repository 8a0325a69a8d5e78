"""Batched sampling: penalties, temperature, top-k / top-p / min-p, seeded draws, logprobs.

Every transform runs on the whole [M, vocab] tensor at once, and only when some row asks for it,
so an all-greedy batch costs one argmax. Rows with a `seed` draw from their own torch.Generator,
so their output does not depend on what else is in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.sequence import Sequence


@dataclass(slots=True)
class SamplerOutput:
    token_ids: list[int]
    # per row: (sampled token logprob, [(token_id, logprob), ...] best first) or None when not asked
    logprobs: list[tuple[float, list[tuple[int, float]]] | None]


class Sampler:
    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator  # for rows without their own seed

    @torch.inference_mode()
    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> SamplerOutput:
        """logits fp32 [M, vocab] (modified in place); seqs[i] owns row i."""
        params = [s.params for s in seqs]
        rows = len(seqs)
        device = logits.device
        self._apply_penalties(logits, seqs)

        want_logprobs = [p.logprobs is not None for p in params]
        logprob_rows = torch.log_softmax(logits, dim=-1) if any(want_logprobs) else None

        greedy = [p.temperature == 0 for p in params]
        # max(dim).indices, not argmax: same first-maximum tie rule, several times faster on CPU
        if all(greedy):
            tokens = logits.max(dim=-1).indices
        else:
            temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], device=device)
            scaled = logits / temps[:, None]
            self._apply_top_k_top_p(scaled, params)
            self._apply_min_p(scaled, params)
            probs = torch.softmax(scaled, dim=-1)
            noise = self._exponential_noise(probs, seqs)
            # Gumbel-max in its exponential form: argmax p / E, E ~ Exp(1), is a draw from p
            sampled = (probs / noise).max(dim=-1).indices
            if any(greedy):
                is_greedy = torch.tensor(greedy, device=device)
                tokens = torch.where(is_greedy, logits.max(dim=-1).indices, sampled)
            else:
                tokens = sampled
        token_ids = tokens.tolist()
        out_logprobs: list[tuple[float, list[tuple[int, float]]] | None] = [None] * rows
        if logprob_rows is not None:
            out_logprobs = self._gather_logprobs(logprob_rows, tokens, params, want_logprobs)
        return SamplerOutput(token_ids, out_logprobs)

    def _apply_penalties(self, logits: torch.Tensor, seqs: list[Sequence]) -> None:
        vocab = logits.shape[1]
        rep_rows = [i for i, s in enumerate(seqs) if s.params.repetition_penalty != 1.0]
        if rep_rows:
            # HF semantics: every token seen in prompt or output, positive logits / p, negative * p
            row_idx = [r for r in rep_rows for _ in seqs[r].all_token_ids()]
            tok_idx = [t for r in rep_rows for t in seqs[r].all_token_ids()]
            seen = torch.zeros(len(rep_rows), vocab, dtype=torch.bool, device=logits.device)
            local = {r: i for i, r in enumerate(rep_rows)}
            seen[torch.tensor([local[r] for r in row_idx], dtype=torch.long), torch.tensor(tok_idx, dtype=torch.long)] = True
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
            counts = torch.zeros(len(pf_rows), vocab, device=logits.device)
            row_idx = torch.tensor([i for i, r in enumerate(pf_rows) for _ in seqs[r].output_token_ids])
            tok_idx = torch.tensor([t for r in pf_rows for t in seqs[r].output_token_ids])
            counts.index_put_((row_idx, tok_idx), torch.ones(len(tok_idx)), accumulate=True)
            freq = torch.tensor([seqs[r].params.frequency_penalty for r in pf_rows])[:, None]
            pres = torch.tensor([seqs[r].params.presence_penalty for r in pf_rows])[:, None]
            index = torch.tensor(pf_rows, device=logits.device)
            logits[index] -= freq * counts + pres * (counts > 0).float()

    @staticmethod
    def _apply_top_k_top_p(logits: torch.Tensor, params: list) -> None:
        vocab = logits.shape[1]
        top_k = [p.top_k if p.top_k > 0 else vocab for p in params]
        top_p = [p.top_p for p in params]
        if all(k >= vocab for k in top_k) and all(p >= 1.0 for p in top_p):
            return
        sorted_logits, order = logits.sort(dim=-1, descending=True)          # [M, V]
        ranks = torch.arange(vocab, device=logits.device)[None, :]
        drop = ranks >= torch.tensor(top_k, device=logits.device)[:, None]   # top-k
        probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
        # top-p: drop a token once the mass before it already reaches p (the best token always stays)
        mass_before = probs.cumsum(dim=-1) - probs
        drop |= mass_before >= torch.tensor(top_p, device=logits.device)[:, None]
        drop[:, 0] = False
        logits.scatter_(1, order, sorted_logits.masked_fill(drop, float("-inf")))

    @staticmethod
    def _apply_min_p(logits: torch.Tensor, params: list) -> None:
        min_p = [p.min_p for p in params]
        if not any(min_p):
            return
        probs = torch.softmax(logits, dim=-1)
        threshold = probs.max(dim=-1, keepdim=True).values * torch.tensor(min_p, device=logits.device)[:, None]
        logits.masked_fill_(probs < threshold, float("-inf"))

    def _exponential_noise(self, probs: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        noise = torch.empty_like(probs)
        seeded = [i for i, s in enumerate(seqs) if s.generator is not None]
        if len(seeded) < len(seqs):
            noise.exponential_(generator=self.generator)
        for i in seeded:  # one draw per seeded row from its own generator: batch-independent
            noise[i].exponential_(generator=seqs[i].generator)
        return noise

    @staticmethod
    def _gather_logprobs(
        logprob_rows: torch.Tensor, tokens: torch.Tensor, params: list, wanted: list[bool]
    ) -> list[tuple[float, list[tuple[int, float]]] | None]:
        sampled = logprob_rows.gather(1, tokens[:, None]).squeeze(1).tolist()
        max_n = max((p.logprobs or 0) for p in params)
        top_values, top_ids = (logprob_rows.topk(max_n, dim=-1) if max_n else (None, None))
        top_v = top_values.tolist() if top_values is not None else None
        top_i = top_ids.tolist() if top_ids is not None else None
        result: list[tuple[float, list[tuple[int, float]]] | None] = []
        for row, p in enumerate(params):
            if not wanted[row]:
                result.append(None)
                continue
            n = p.logprobs or 0
            top = list(zip(top_i[row][:n], top_v[row][:n], strict=True)) if n else []
            result.append((sampled[row], top))
        return result
