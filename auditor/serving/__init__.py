"""The audited inference path: what the lifespan loads (engine, KGs, rule packs), the per-request pipeline
(input gate -> KG linking -> engine -> output gate -> audit record) and its metrics."""
