"""The compliance console: server-rendered pages at /console over the same services (and access-logged
readers) as the compliance API. `install_console(app)` mounts it."""
