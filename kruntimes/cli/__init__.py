"""The ``kruntimes`` command line."""
