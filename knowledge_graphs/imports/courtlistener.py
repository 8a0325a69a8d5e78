"""`courtlistener-citations`: CourtListener's bulk citations joined with its opinion clusters, one CSV.

CourtListener publishes citations (`id, volume, reporter, page, type, cluster_id, date_created,
date_modified`) and clusters (`id, case_name, case_name_short, date_filed, ...`) as separate bulk files.
This format reads **one CSV that joins them on cluster_id**: a row per citation with the citation file's
columns and the cluster's `case_name` (or `case_name_full`), `case_name_short` and `date_filed`, and
optionally the docket's `court_id` (courts-db's id, as CourtListener uses). For example, with DuckDB:

    COPY (SELECT c.*, k.case_name, k.case_name_short, k.case_name_full, k.date_filed FROM 'citations.csv' c
          JOIN 'opinion-clusters.csv' k ON k.id = c.cluster_id) TO 'courtlistener.csv' (HEADER);

(add `d.court_id` with `JOIN 'dockets.csv' d ON d.id = k.docket_id` for courts other than the Supreme Court.)

(Two separate imports would not do: a cluster alone has no citation to index, and an import under the same
name replaces the one before.) Citation types are CourtListener's: 1 federal, 2 state, 3 state regional,
4 specialty, 5 early Supreme Court, 6 Lexis, 7 West, 8 neutral, 9 journal; every reporter, Lexis's and
Westlaw's ("2004 U.S. LEXIS 1234", "2004 WL 123456") included, must be one reporters-db knows.

Each cluster becomes a case (`case:cl-<cluster_id>`) through the same `case_record` as the `cases` format, so it
joins the same case index: its citation is the preferred one (U.S., then by type, vendor citations last), the
others are kept as `parallel_citations`. The court is `court_id`, or scotus for the Supreme Court's reporters
(U.S., S. Ct., L. Ed.); a cluster cited in another reporter without a court_id is an error. Coverage: each
reporter's volume range in the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from knowledge_graphs.curated import CuratedDataError
from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.rows import checked, csv_records, decode, iso_date, text
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph
from knowledge_graphs.sources.legal import case_record, parse_citation

DOMAIN = "legal"
REQUIRED = ("volume", "reporter", "page", "type", "cluster_id", "date_filed")
SOURCE = "CourtListener (Free Law Project) bulk data: citations and opinion clusters"
TYPE_PREFERENCE = (1, 5, 2, 3, 4, 8, 9, 6, 7)      # after the U.S. Reports; Lexis and West last
SCOTUS_REPORTERS = {"U.S.", "S. Ct.", "L. Ed.", "L. Ed. 2d"}


@dataclass(slots=True)
class _Cluster:
    name: str
    date_filed: str
    court: str | None
    line: int
    citations: list[tuple[int, str, int]] = field(default_factory=list)   # (type, citation, line)
    aliases: list[str] = field(default_factory=list)


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(DOMAIN, stamp.overlay)
    clusters: dict[str, _Cluster] = {}
    seen: dict[str, int] = {}
    volumes: dict[str, tuple[int, int]] = {}
    records = csv_records(decode(data, log) or "", log, required=REQUIRED)
    for _ in checked(records, log, lambda line, record: _citation(record, line, kg, clusters, seen, volumes)):
        overlay.rows += 1
    for cluster_id, cluster in clusters.items():       # what only the whole cluster shows
        preferred = _preferred(cluster.citations)
        if _court(cluster, preferred) is None:
            log.add(cluster.line, "court_id", f"is empty: {preferred[1]} does not say the court of cluster "
                                              f"{cluster_id}")
    log.raise_if_any()
    for cluster_id, cluster in clusters.items():
        entity, facts = _case(cluster_id, cluster, stamp)
        overlay.entities.append(entity)
        overlay.facts += facts
    overlay.coverage = [{"index": f"reporter:{reporter}", "from": low, "to": high}
                        for reporter, (low, high) in sorted(volumes.items())]
    return overlay


def _citation(record: dict[str, str], line: int, kg: KnowledgeGraph, clusters: dict[str, _Cluster],
              seen: dict[str, int], volumes: dict[str, tuple[int, int]]) -> None:
    cluster_id = text(record, "cluster_id")
    assert cluster_id is not None
    if not cluster_id.isdigit():
        raise FieldError("cluster_id", f"must be a whole number, got {cluster_id!r}")
    kind_raw = text(record, "type")
    if kind_raw is None or not kind_raw.isdigit() or not 1 <= int(kind_raw) <= 9:
        raise FieldError("type", f"must be a CourtListener citation type 1-9, got {kind_raw!r}")
    kind = int(kind_raw)
    volume, reporter, page = text(record, "volume"), text(record, "reporter"), text(record, "page")
    citation = f"{volume} {reporter} {page}"
    try:
        number, reporter, _ = parse_citation(citation, where="row")
    except CuratedDataError:
        field_name = "volume" if not str(volume).isdigit() else "page"
        raise FieldError(field_name, f"{citation!r} is not 'volume reporter page'") from None
    if kg.entity(f"reporter:{reporter}") is None:
        raise FieldError("reporter", f"reporter {reporter!r} is not in reporters-db")
    if citation in seen:
        raise FieldError("page", f"citation {citation} already appears on line {seen[citation]}")
    name = text(record, "case_name", required=False) or text(record, "case_name_full", required=False)
    if name is None:
        raise FieldError("case_name", "is empty (and so is case_name_full)")
    date_filed = iso_date(record, "date_filed")
    court = text(record, "court_id", required=False)
    if court is not None and kg.entity(f"court:{court}") is None:
        raise FieldError("court_id", f"{court!r} is not a courts-db court id")
    assert date_filed is not None
    cluster = clusters.get(cluster_id)
    if cluster is None:
        cluster = clusters[cluster_id] = _Cluster(name, date_filed, court, line)
        short = text(record, "case_name_short", required=False)
        if short and short != name:
            cluster.aliases.append(short)
    elif (cluster.name, cluster.date_filed) != (name, date_filed):
        raise FieldError("case_name" if cluster.name != name else "date_filed", f"cluster {cluster_id} is "
                         f"{cluster.name!r}, filed {cluster.date_filed}, on line {cluster.line}")
    cluster.court = cluster.court or court
    seen[citation] = line
    cluster.citations.append((kind, citation, line))
    low, high = volumes.get(reporter, (number, number))
    volumes[reporter] = (min(low, number), max(high, number))


def _preferred(citations: list[tuple[int, str, int]]) -> tuple[int, str, int]:
    """The citation a case is indexed by: the U.S. Reports', else the first of the most official type."""
    def rank(item: tuple[int, str, int]) -> tuple[int, int]:
        kind, citation, _ = item
        return (0 if _reporter(citation) == "U.S." else 1), TYPE_PREFERENCE.index(kind)
    return min(citations, key=rank)


def _court(cluster: _Cluster, preferred: tuple[int, str, int]) -> str | None:
    return cluster.court or ("scotus" if _reporter(preferred[1]) in SCOTUS_REPORTERS else None)


def _reporter(citation: str) -> str:
    return parse_citation(citation, where="row")[1]


def _case(cluster_id: str, cluster: _Cluster, stamp: ImportStamp) -> tuple[Entity, list[Fact]]:
    preferred = _preferred(cluster.citations)
    _, citation, line = preferred
    court = _court(cluster, preferred)
    provenance = stamp.provenance(source=SOURCE, line=line, what=f"{cluster.name}, {citation}")
    attributes: dict[str, Any] = {"decided": cluster.date_filed, "courtlistener_cluster_id": int(cluster_id)}
    others = [c for _, c, _ in cluster.citations if c != citation]
    if others:
        attributes["parallel_citations"] = others
    assert court is not None
    return case_record(f"case:cl-{cluster_id}", cluster.name, list(cluster.aliases), citation,
                       int(cluster.date_filed[:4]), court, provenance, attributes)
