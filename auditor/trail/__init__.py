"""The audit trail: append-only, hash-chained records, their evaluations, queries, export, retention and the
access log. Everything a compliance team reads lives here; nothing here knows about HTTP or the engine."""
