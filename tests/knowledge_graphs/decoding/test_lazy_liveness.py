"""A view finds which token-trie nodes are live on first use instead of walking its whole trie when it is built:
the same nodes and the same continuations as the whole walk, whatever order they are asked in, at a fraction of
the build, and what it finds later counts toward the view's size."""

from __future__ import annotations

from knowledge_graphs.decoding.constraint import KGConstraintProcessor
from knowledge_graphs.decoding.constraint_masks import REACHED_BYTES, AllowedView
from knowledge_graphs.decoding.surface_guard import GuardState
from knowledge_graphs.decoding.trie import ROOT
from tests.knowledge_graphs.decoding.test_cache_limits import ALLOWED_SETS, _params


def _whole_walk(view: AllowedView) -> tuple[set[int], dict[int, list[int]]]:
    """What views computed when built before: a walk of the whole token trie from the root, skipping the subtree
    under any token that leaves a forbidden name linked."""
    live: set[int] = set()
    children: dict[int, list[int]] = {}
    stack = [(ROOT, GuardState())]
    while stack:
        node, guard = stack.pop()
        for token_id, child in view.trie.children_of(node).items():
            after, violated = view.domain.step(guard, token_id, view.allowed_nodes)
            if violated:
                continue
            live.add(child)
            if token_id < view.domain.vocab_size:
                children.setdefault(node, []).append(token_id)
            stack.append((child, after))
    return live, children


def _every_node(view: AllowedView) -> list[int]:
    """Every node of the view's token trie, made now if not yet."""
    nodes, frontier = [ROOT], [ROOT]
    while frontier:
        frontier = [child for node in frontier for child in view.trie.children_of(node).values()]
        nodes += frontier
    return sorted(nodes)


def _processor(kg, tokenizer) -> KGConstraintProcessor:
    return KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                 kgs={"medical": kg})


def _sets(kg) -> list[list[str]]:
    return [*ALLOWED_SETS, [], sorted(e.id for e in kg.entities())]


def test_live_nodes_and_continuations_are_those_of_the_whole_walk(kg, tokenizer) -> None:
    domain = _processor(kg, tokenizer).domains["medical"]
    for allowed in _sets(kg):
        for order in (1, -1):   # children before parents too: a node's path is walked from its nearest known one
            view = AllowedView(domain, frozenset(allowed) & domain.entity_ids)
            expected_live, expected_children = _whole_walk(view)
            nodes = _every_node(view)[::order]
            assert {n for n in nodes if view.is_live(n)} == expected_live, allowed
            for node in [ROOT, *expected_live]:
                assert view._live_children_of(node) == expected_children.get(node, []), (allowed, node)


def test_building_a_view_reaches_only_the_first_tokens(kg, tokenizer) -> None:
    domain = _processor(kg, tokenizer).domains["medical"]
    view = AllowedView(domain, domain.entity_ids)
    made = len(view.trie)
    assert len(view._reached) <= 1 + len(view.trie.children_of(ROOT)) < len(_every_node(view))
    assert made == 1 + len(view.trie.children_of(ROOT))   # nor does it make the trie's deeper nodes


def test_nodes_found_later_count_toward_the_view_and_its_domain(kg, tokenizer) -> None:
    processor = _processor(kg, tokenizer)
    domain = processor.domains["medical"]
    allowed = sorted(domain.entity_ids)
    processor.prepare(_params(allowed))
    view = domain.view(allowed)
    deepest = max(_every_node(view), key=lambda n: view.trie.depth[n])
    before_view, before_domain, before_reached = view.approx_bytes, domain.cached_view_bytes, len(view._reached)
    view.is_live(deepest)
    grown = REACHED_BYTES * (len(view._reached) - before_reached)
    assert grown > 0
    assert view.approx_bytes - before_view == grown and domain.cached_view_bytes - before_domain == grown
