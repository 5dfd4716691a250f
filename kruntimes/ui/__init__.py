"""`kruntimes ui`: a read-only web view of the journal (timelines, a Run's story, replay, what-if).

``queries`` holds the read-only connection and asks the journal's history layer
(``kruntimes.journal.history``, the same questions ``kruntimes history`` asks) for every
answer; ``server`` routes requests to the page modules, which turn those answers into
escaped HTML and Plotly figures.
Nothing here writes to the journal, and nothing imports the Kubernetes client.
"""
