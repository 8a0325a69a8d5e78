"""Per-tenant settings kept in the audit store (today: the domain-detection mode)."""
