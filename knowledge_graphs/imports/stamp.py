"""Provenance of an imported fact: which file (by SHA-256), which line, when, and who imported it."""

from __future__ import annotations

from dataclasses import dataclass

from knowledge_graphs.model import Provenance


@dataclass(frozen=True, slots=True)
class ImportStamp:
    """What every fact of one import shares."""

    overlay: str          # the overlay's name: a later import under the same name replaces it
    format: str           # ofac-sdn | formulary | cases | triples
    file_name: str
    file_sha256: str
    imported_at: str      # ISO-8601 UTC
    imported_by: str      # the API key id, or "cli:<user>@<host>" where no key exists yet
    as_of: str            # the date the source is valid for (YYYY-MM-DD), unless a row says otherwise

    def provenance(self, *, source: str, line: int, what: str, as_of: str | None = None) -> ImportedProvenance:
        """The provenance of the record on `line`: evidence built from it names the file, line and import."""
        locator = (f"{self.file_name} line {line} ({what}); sha256 {self.file_sha256[:12]}, "
                   f"imported {self.imported_at[:19]}Z by {self.imported_by}")
        return ImportedProvenance(source, locator, as_of or self.as_of, file_sha256=self.file_sha256, row=line,
                                  imported_at=self.imported_at, imported_by=self.imported_by, overlay=self.overlay)


@dataclass(frozen=True, slots=True)
class ImportedProvenance(Provenance):
    """A `Provenance` whose locator names the row; the structured fields say the same for machines."""

    file_sha256: str = ""
    row: int = 0
    imported_at: str = ""
    imported_by: str = ""
    overlay: str = ""
