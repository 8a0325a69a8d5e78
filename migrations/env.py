"""Alembic environment. The engine comes from `auditor.store.database.alembic_config` (config.attributes["engine"]),
or from AUDITOR_DATABASE_URL when alembic is run by hand."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Engine, create_engine

from auditor.store.schema import include_object_for, metadata

config = context.config
target_metadata = metadata


def _engine() -> Engine:
    engine = config.attributes.get("engine")
    if engine is not None:
        return engine
    from auditor.settings import get_settings

    return create_engine(get_settings().database_url)


def run_migrations_offline() -> None:
    context.configure(url=str(_engine().url), target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    with _engine().connect() as connection:
        # render_as_batch: SQLite can only ALTER tables by copying them; later revisions need it.
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True,
                          include_object=include_object_for(connection.dialect.name))
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
