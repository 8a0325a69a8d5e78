"""Tables of the KG versions (issue 13), on the audit schema's `Base`.

- `kg_imports`: one imported file as an overlay: its file hash, format, who imported it and when, and the
  overlay itself (entities and facts with per-row provenance) as compressed canonical JSON whose SHA-256
  is `digest`. Rows are never changed.
- `kg_versions`: the history of each domain's KG, append-only: every import, rollback and the packaged
  version it started from. A domain's current version is its row with the highest `seq`; `overlays` lists
  the imports applied on the packaged KG, in order; `version_hash` is what audit records name.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from auditor.store.base import Base, new_id


class KgImport(Base):
    __tablename__ = "kg_imports"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    domain: Mapped[str] = mapped_column(String(32), index=True)
    name: Mapped[str] = mapped_column(String(128))                 # the overlay's name
    format: Mapped[str] = mapped_column(String(32))
    file_name: Mapped[str] = mapped_column(String(512))
    file_sha256: Mapped[str] = mapped_column(String(64), index=True)
    as_of: Mapped[str] = mapped_column(String(10))
    rows: Mapped[int] = mapped_column(Integer)
    entities: Mapped[int] = mapped_column(Integer)
    facts: Mapped[int] = mapped_column(Integer)
    supersedes: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(64))                # sha256 of the canonical overlay JSON
    overlay: Mapped[bytes] = mapped_column(LargeBinary)            # zlib(canonical JSON)
    imported_at: Mapped[datetime]
    imported_by: Mapped[str] = mapped_column(String(200))          # an API key id, or cli:<user>@<host>


class KgVersion(Base):
    __tablename__ = "kg_versions"

    seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                     autoincrement=True)
    domain: Mapped[str] = mapped_column(String(32), index=True)
    version_hash: Mapped[str] = mapped_column(String(64), index=True)
    base_version: Mapped[str] = mapped_column(String(64))          # the packaged KG the overlays sit on
    overlays: Mapped[list[Any]]                                    # kg_imports ids, in the order applied
    action: Mapped[str] = mapped_column(String(16))                # packaged | import | rollback
    import_id: Mapped[str | None] = mapped_column(String(36))      # action import: the new overlay
    rollback_to: Mapped[int | None] = mapped_column(BigInteger)    # action rollback: the seq restored
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(200))
