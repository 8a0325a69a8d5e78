"""KG versions: imported overlays stored in the audit store, the version history, and the live KG each process serves."""
