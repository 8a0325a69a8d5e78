"""HTTP routers. Thin: parse, call a service function, return a schema."""
