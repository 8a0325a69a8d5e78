"""Who is calling: API keys (hashed, revocable) and the principal (tenant, role) a request runs as."""
