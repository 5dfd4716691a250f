"""The journal's Alembic scripts, installed as ``kruntimes.migrations`` (see pyproject.toml)."""
