"""The shortest way to close a constrained value: what JSON mode forces when the token budget runs out.

XGrammar tells what is forced (`find_jump_forward_string`) but not what is shortest when there is a
choice. A small breadth-first search over closing pieces finds it: from the matcher's current state,
apply what is forced, and if the grammar is not complete yet, try each piece (close a string, an
object or an array, write a value, ...) on a fork of the matcher. The first complete string found is
the shortest in pieces. Nested values make that search wide, so a greedy pass goes first: take the first
closer the grammar accepts (end the string, the object, the array, then write the smallest value) until
the grammar is complete; it closes `{"a": [1, {"b": "x` as `"}]}` in four forks. Only forks are advanced;
the request's own matcher is never touched.
"""

from __future__ import annotations

import string
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xgrammar as xgr


# Ordered so that the usual closers come first: between two candidates of the same length the earlier wins.
CLOSING_PIECES = ('"', "}", "]", "0", "null", ",", ":", '""', " ", "a", "-", ".", "e", "1", "true", "false")
MAX_NODES = 400      # matcher forks tried before giving up (a closing this hard is not worth forcing)
MAX_DEPTH = 24       # pieces per closing
# The greedy pass: closers first, then "," (a required property may still be missing), then the smallest values.
GREEDY_PIECES = ('"', "}", "]", ",", "0", "null", '""', ":", " ")
GREEDY_STEPS = 64
# When no closer fits (an enum or a pattern wants a letter): the first character the grammar takes.
FALLBACK_CHARS = tuple(string.ascii_lowercase + string.digits + string.ascii_uppercase)


def shortest_closing(matcher: xgr.GrammarMatcher) -> str | None:
    """Text that completes the grammar from `matcher`'s state ("" when it is complete already), or None
    when no closing is found within the search bounds."""
    if matcher.is_completed():
        return ""
    greedy = _greedy_closing(matcher)
    return greedy if greedy is not None else _searched_closing(matcher)


def _greedy_closing(matcher: xgr.GrammarMatcher) -> str | None:
    node, text = matcher.fork(), ""
    for _ in range(GREEDY_STEPS):
        forced = node.find_jump_forward_string()
        if forced:
            if not node.accept_string(forced):
                return None
            text += forced
        if node.is_completed():
            return text
        finishing = next((p for p in GREEDY_PIECES if _completes(node, p)), None)
        if finishing is not None:
            return text + finishing
        piece = next((p for p in GREEDY_PIECES + FALLBACK_CHARS if node.fork().accept_string(p)), None)
        if piece is None:
            return None
        node.accept_string(piece)
        text += piece
        if node.is_completed():
            return text
    return None


def _completes(node: xgr.GrammarMatcher, piece: str) -> bool:
    trial = node.fork()
    return trial.accept_string(piece) and trial.is_completed()


def _searched_closing(matcher: xgr.GrammarMatcher) -> str | None:
    queue: deque[tuple[xgr.GrammarMatcher, str, int]] = deque([(matcher.fork(), "", 0)])
    tried = 0
    while queue and tried < MAX_NODES:
        node, text, depth = queue.popleft()
        forced = node.find_jump_forward_string()
        if forced:
            if not node.accept_string(forced):
                continue
            text += forced
        if node.is_completed():
            return text
        if depth >= MAX_DEPTH:
            continue
        for piece in CLOSING_PIECES:
            tried += 1
            child = node.fork()
            if child.accept_string(piece):
                if child.is_completed():
                    return text + piece
                queue.append((child, text + piece, depth + 1))
    return None
