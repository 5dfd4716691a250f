"""`kruntimes ui`: a read-only web view of the journal (timelines, a Run's story, replay, what-if).

``queries`` is the only module that reads the database; ``server`` routes requests to the
page modules, which turn what ``queries`` returns into escaped HTML and Plotly figures.
Nothing here writes to the journal, and nothing imports the Kubernetes client.
"""
