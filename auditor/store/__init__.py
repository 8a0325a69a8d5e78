"""Database plumbing shared by every room: the engine and sessions, the declarative base, Alembic."""
