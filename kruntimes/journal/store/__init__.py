"""The journal's store: URL and engine, the two backends, schema, migrations and bounded database calls.

Nothing here knows the writer (``journal.write``): the store keeps records, the writer
decides which to hand it. See docs/architecture.md, "The journal".
"""
