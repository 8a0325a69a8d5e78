"""Whether a U.S.C. or C.F.R. reference the KG does not hold falls inside what an import declared complete.

The USLM importer declares the titles of the U.S. Code it read whole (`usc_title`), the eCFR importer the C.F.R.
titles (`cfr_title`) and parts (`cfr_part`, "12-1026") it read whole. Inside that coverage a section the index
does not hold does not exist ("no section 5330 in Title 31"): the reference is contradicted, with the nearest
sections the index does hold as evidence. Outside it (the starter KG declares none for the Code) the reference
stays unverifiable, a possible fabrication. Coverage is data from the import, never guessed from what is loaded."""

from __future__ import annotations

import re
from typing import Any

from knowledge_graphs.model import KnowledgeGraph

_LEADING_NUMBER = re.compile(r"\d+")


def absence_inside_coverage(kg: KnowledgeGraph, held: list[tuple[str, str, str]],
                            key: tuple[str, str, str]) -> str | None:
    """Why the referenced section cannot exist, or None when no import covers its title or part completely.
    `held` are the (code, title, section) keys of the sections the KG's statute index holds."""
    code, title, section = key
    entry = _covering(getattr(kg, "coverage", []), code, title, section)
    if entry is None:
        return None
    where = f"Title {title}" if code == "usc" or "." not in section else f"{title} C.F.R. Part {section.split('.')[0]}"
    label = "section" if code == "usc" or "." in section else "part"
    return (f"no {label} {section} in {where}: the index holds {_scope(entry)} completely (imported as "
            f"{entry.get('overlay', 'an overlay')})" + _nearest(held, key))


def _covering(coverage: list[dict[str, Any]], code: str, title: str, section: str) -> dict[str, Any] | None:
    if code == "usc":
        return next((c for c in coverage if c.get("index") == "usc_title" and title in map(str, c.get("values", []))),
                    None)
    if code != "cfr":
        return None
    part = section.split(".")[0]
    whole_title = next((c for c in coverage if c.get("index") == "cfr_title" and title in map(str, c.get("values", []))),
                       None)
    if whole_title is not None or "." not in section:
        return whole_title   # a part's absence is known only where its whole title was read
    return next((c for c in coverage if c.get("index") == "cfr_part" and f"{title}-{part}" in c.get("values", [])),
                None)


def _scope(entry: dict[str, Any]) -> str:
    values = ", ".join(map(str, entry.get("values", [])))
    return {"usc_title": f"U.S. Code title(s) {values}", "cfr_title": f"C.F.R. title(s) {values}",
            "cfr_part": f"C.F.R. part(s) {values}"}.get(str(entry.get("index")), values)


def _nearest(held: list[tuple[str, str, str]], key: tuple[str, str, str]) -> str:
    """"; the nearest it holds: 31 U.S.C. 5331, 5332": sections of the same title (or part) around the number."""
    code, title, section = key
    same = [k[2] for k in held if k[0] == code and k[1] == title
            and (code != "cfr" or "." not in section or k[2].split(".")[0] == section.split(".")[0])]
    target = _number(section)
    if not same or target is None:
        return ""
    def distance(other: str) -> tuple[int, int, str]:
        number = _number(other) or (0, 0)
        return abs(number[0] - target[0]), abs(number[1] - target[1]), other

    closest = sorted(same, key=distance)[:3]
    name = "U.S.C." if code == "usc" else "C.F.R."
    return f"; the nearest it holds: {title} {name} " + ", ".join(sorted(closest, key=lambda s: _number(s) or (0, 0)))


def _number(section: str) -> tuple[int, int] | None:
    """(1026, 18) for "1026.18", (1983, 0) for "1983": C.F.R. sections order by part, then section number."""
    head = section.split(".")
    match = _LEADING_NUMBER.match(head[0])
    if match is None:
        return None
    tail = _LEADING_NUMBER.match(head[1]) if len(head) > 1 else None
    return int(match.group(0)), int(tail.group(0)) if tail else 0
