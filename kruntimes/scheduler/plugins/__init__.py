"""Filter and Score plugins, one module each."""
