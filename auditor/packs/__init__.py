"""Versioned, reloadable rule packs: the store's registry of packs and which one each domain uses now."""
