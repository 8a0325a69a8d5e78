"""One builder per domain: `build(data_dir) -> DomainData` from installed packages plus curated YAML."""
