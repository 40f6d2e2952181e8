"""CLI commands grouped by room; each module exposes register(app)."""
