"""The journal's history room: the history tables, how records become their rows, and every question asked of them.

``journal_records`` is the truth; the history tables are what people's questions read
(``kruntimes history`` and the web view alike). Importing the package imports nothing;
import the module you need. See docs/architecture.md, "The journal".
"""
