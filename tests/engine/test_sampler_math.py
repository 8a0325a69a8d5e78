"""The sampler's distributions, at vocabularies wide enough to span many inverse-CDF blocks.

Where the math is unchanged from the sort-based sampler it replaced (penalties, greedy, logprobs,
top-k), outputs are compared for equality with that sampler's code, kept below as the reference.
Where it changed (inverse-CDF draws instead of exponential races; top-p by rejection instead of a
sort), seeded draws are compared with the exact distribution by a chi-square test. Seeds are fixed,
so each test is deterministic; the thresholds (p > 1e-4) are what a correct sampler passes at any seed.
"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from engine import sampler as sampler_module
from engine.sampler import BLOCK, Sampler, draw
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

DRAWS = 40_000


def _seqs(params: list[SamplingParams]) -> list[Sequence]:
    return [Sequence(str(i), [1], p, 1, 0.0) for i, p in enumerate(params)]


def _sample_counts(logits_row: torch.Tensor, n: int, seed: int = 0, **params) -> torch.Tensor:
    """Draw n tokens from one row (as n identical rows of one batch); counts per token id."""
    seqs = _seqs([SamplingParams(**params)] * n)
    out = Sampler(torch.Generator().manual_seed(seed))(logits_row.repeat(n, 1), seqs)
    return torch.bincount(torch.tensor(out.token_ids), minlength=logits_row.numel())


def _assert_follows(counts: torch.Tensor, probs: torch.Tensor) -> None:
    """Every draw inside the support, and the counts fit the probabilities (chi-square over the support,
    cells with expectation below 5 pooled into one)."""
    assert int(counts[probs == 0].sum()) == 0, "drew a token of probability 0"
    expected = probs * counts.sum()
    big = expected >= 5
    observed = torch.cat([counts[big].double(), counts[~big & (probs > 0)].sum().double()[None]])
    wanted = torch.cat([expected[big].double(), expected[~big & (probs > 0)].sum().double()[None]])
    if wanted[-1] == 0:
        observed, wanted = observed[:-1], wanted[:-1]
    assert len(wanted) >= 2, "the test needs a distribution over several tokens"
    assert chisquare(observed.numpy(), wanted.numpy() * observed.sum().item() / wanted.sum().item()).pvalue > 1e-4


# -- the sort-based filter the sampler used before, as the reference --------------------------------------
def _reference_top_k_top_p(logits: torch.Tensor, params: list[SamplingParams]) -> None:
    vocab = logits.shape[1]
    top_k = [p.top_k if p.top_k > 0 else vocab for p in params]
    top_p = [p.top_p for p in params]
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab)[None, :]
    drop = ranks >= torch.tensor(top_k)[:, None]
    probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    drop |= mass_before >= torch.tensor(top_p)[:, None]
    drop[:, 0] = False
    logits.scatter_(1, order, sorted_logits.masked_fill(drop, float("-inf")))


def _reference_probs(row: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution the old sampler drew from: temperature, top-k / top-p by sort, min-p, softmax."""
    scaled = (row / params.temperature)[None].clone()
    _reference_top_k_top_p(scaled, [params])
    probs = torch.softmax(scaled, dim=-1)
    if params.min_p:
        probs = probs.masked_fill(probs < probs.max() * params.min_p, 0.0)
    return (probs / probs.sum())[0]


# -- draw ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("vocab", [7, BLOCK, 3 * BLOCK + 5, 5000])
def test_draw_follows_the_weights_and_never_picks_a_zero(vocab):
    gen = torch.Generator().manual_seed(vocab)
    weights = torch.rand(vocab, generator=gen) ** 4
    weights[torch.randperm(vocab, generator=gen)[: vocab // 3]] = 0.0   # masked tokens in every block
    tokens = draw(weights.repeat(DRAWS, 1), torch.rand(DRAWS, dtype=torch.float64, generator=gen))
    _assert_follows(torch.bincount(tokens, minlength=vocab), weights / weights.sum())


def test_draw_reaches_both_ends_of_the_vocabulary():
    weights = torch.zeros(3 * BLOCK + 5)
    weights[0], weights[-1] = 1.0, 1.0
    tokens = draw(weights.repeat(4, 1), torch.tensor([0.0, 0.49, 0.51, 1.0 - 2**-53], dtype=torch.float64))
    assert tokens.tolist() == [0, 0, weights.numel() - 1, weights.numel() - 1]


def test_draw_a_lone_allowed_token_far_below_the_rest():
    """One token left by a mask, however unlikely the model finds it, is the one drawn."""
    logits = torch.full((1, 4 * BLOCK), float("-inf"))
    logits[0, 700] = -1e4
    seqs = _seqs([SamplingParams(temperature=0.7)])
    assert Sampler(torch.Generator().manual_seed(0))(logits, seqs).token_ids == [700]


# -- temperature, top-k, top-p, min-p against the exact distribution --------------------------------------------
ROW = torch.randn(3 * BLOCK + 11, generator=torch.Generator().manual_seed(7))


@pytest.mark.parametrize("params", [
    dict(temperature=1.0),
    dict(temperature=0.5),
    dict(temperature=1.7),
    dict(temperature=1.0, top_k=20),
    dict(temperature=1.0, top_p=0.9),
    dict(temperature=1.2, top_p=0.5),
    dict(temperature=1.0, top_k=40, top_p=0.8),
    dict(temperature=1.0, min_p=0.05),
    dict(temperature=0.8, top_p=0.95, min_p=0.02),
])
def test_sampling_follows_the_sort_based_distribution(params):
    counts = _sample_counts(ROW, DRAWS, **params)
    _assert_follows(counts, _reference_probs(ROW, SamplingParams(**params)))


def test_top_p_on_a_flat_wide_row():
    """A near-uniform row (a random-weight model): the nucleus holds most of the vocabulary."""
    row = torch.randn(40 * BLOCK, generator=torch.Generator().manual_seed(3)) * 0.1
    counts = _sample_counts(row, DRAWS, top_p=0.7)
    reference = _reference_probs(row, SamplingParams(top_p=0.7))
    assert int(counts[reference == 0].sum()) == 0
    kept = reference > 0
    assert 0.6 < kept.float().mean() < 0.8   # ~70% of a flat row is in the nucleus
    _assert_follows(counts, reference)


def test_top_k_masks_exactly_what_the_sort_did():
    gen = torch.Generator().manual_seed(1)
    for k in (1, 5, 300, 3 * BLOCK):
        row = torch.randn(3 * BLOCK + 11, generator=gen)
        ours = row.clone()
        sampler_module._keep_top_k(ours, k)
        reference = row[None].clone()
        _reference_top_k_top_p(reference, [SamplingParams(top_k=k)])
        assert torch.equal(ours, reference[0])


def test_filters_touch_only_the_rows_that_ask():
    """In one batch, a top_k=1 row is pinned to its best token while a plain row beside it still
    follows the whole softmax."""
    n = 20_000
    params = [SamplingParams(temperature=1.0, top_k=1), SamplingParams(temperature=1.0)] * (n // 2)
    out = Sampler(torch.Generator().manual_seed(5))(ROW.repeat(n, 1), _seqs(params))
    tokens = torch.tensor(out.token_ids)
    assert set(tokens[0::2].tolist()) == {int(ROW.argmax())}
    _assert_follows(torch.bincount(tokens[1::2], minlength=ROW.numel()), torch.softmax(ROW, -1))


def test_no_row_is_sorted(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the sampler sorted a row")

    monkeypatch.setattr(torch, "sort", refuse)
    monkeypatch.setattr(torch.Tensor, "sort", refuse)
    params = [SamplingParams(top_p=0.9), SamplingParams(top_k=50, top_p=0.5), SamplingParams(min_p=0.1),
              SamplingParams(temperature=0, logprobs=5)]
    logits = torch.randn(4, 20 * BLOCK, generator=torch.Generator().manual_seed(0))
    assert len(Sampler(torch.Generator().manual_seed(0))(logits, _seqs(params)).token_ids) == 4


def test_wide_logit_ranges_keep_the_distribution():
    """Scaled logits spanning hundreds (a peaked model at a low temperature): the tail below e^-86 of the
    best carries no mass, everything above it is drawn as the softmax says."""
    row = torch.linspace(0.0, -400.0, 2 * BLOCK)
    row[5] = -3.0
    counts = _sample_counts(row, DRAWS, temperature=0.5)
    _assert_follows(counts, torch.softmax(row / 0.5, -1))


# -- what did not change: greedy, logprobs, dead rows ---------------------------------------------------------
def test_greedy_and_logprobs_are_the_model_s():
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(4, 5 * BLOCK, generator=gen)
    params = [SamplingParams(temperature=0, logprobs=3), SamplingParams(temperature=0),
              SamplingParams(temperature=1.0, seed=1, logprobs=0), SamplingParams(temperature=1.0)]
    expected_lp = torch.log_softmax(logits, -1)
    out = Sampler(torch.Generator().manual_seed(0))(logits.clone(), _seqs(params))
    assert out.token_ids[:2] == logits[:2].argmax(-1).tolist()
    assert out.logprobs[1] is None and out.logprobs[3] is None
    token_lp, top = out.logprobs[0]
    assert token_lp == pytest.approx(float(expected_lp[0, out.token_ids[0]]), abs=1e-6)
    values, ids = expected_lp[0].topk(3)
    assert [t for t, _ in top] == ids.tolist()
    assert [lp for _, lp in top] == pytest.approx(values.tolist(), abs=1e-6)
    sampled_lp, sampled_top = out.logprobs[2]
    assert sampled_top == [] and sampled_lp == pytest.approx(float(expected_lp[2, out.token_ids[2]]), abs=1e-6)


def test_rows_with_nothing_allowed_are_reported_dead():
    logits = torch.randn(4, 3 * BLOCK)
    logits[1] = float("-inf")
    logits[3] = float("-inf")
    params = [SamplingParams(temperature=0), SamplingParams(temperature=0), SamplingParams(), SamplingParams(top_p=0.5)]
    assert Sampler(torch.Generator())(logits, _seqs(params)).dead_rows == {1, 3}


def test_a_seeded_row_does_not_depend_on_the_batch():
    row = torch.randn(5 * BLOCK, generator=torch.Generator().manual_seed(9))
    seeded = SamplingParams(temperature=1.0, top_p=0.9, seed=42)

    def run(batch_params: list[SamplingParams], index: int) -> list[int]:
        seqs = _seqs(batch_params)
        for seq in seqs:
            if seq.params.seed is not None:
                seq.generator = torch.Generator().manual_seed(seq.params.seed)
        sampler = Sampler(torch.Generator().manual_seed(0))
        return [sampler(row.repeat(len(seqs), 1), seqs).token_ids[index] for _ in range(30)]

    alone = run([seeded], 0)
    crowded = run([SamplingParams(top_p=0.3), SamplingParams(), seeded, SamplingParams(top_k=3)], 2)
    assert alone == crowded and len(set(alone)) > 1


def test_greedy_takes_the_first_highest_token_as_torch_s_max_does():
    """The CPU pick (numpy's argmax) against torch's max(dim) on rows with ties, a NaN, a row with nothing
    allowed and one with a single token left."""
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(6, 3 * BLOCK, generator=gen).round(decimals=1)     # rounded: many ties at the top
    logits[1, 7] = logits[1, 600] = logits[1].max() + 1.0                   # a tie: the first wins
    logits[2, 50] = float("nan")
    logits[3] = float("-inf")
    logits[4] = float("-inf")
    logits[4, 700] = -3.0
    values, indices = logits.max(dim=-1)
    picked, alive = sampler_module._greedy(logits)
    assert picked == indices.tolist() and picked[1] == 7 and picked[4] == 700
    assert alive == (values > float("-inf")).tolist() == [True, True, False, False, True, True]
    params = [SamplingParams(temperature=0)] * 6
    out = Sampler(torch.Generator())(logits.clone(), _seqs(params))
    assert out.token_ids == picked and out.dead_rows == {2, 3}
    assert sampler_module._greedy(logits.double()) == (picked, alive)     # the torch path, as on a GPU
