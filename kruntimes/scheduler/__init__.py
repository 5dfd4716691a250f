"""The pure scheduling core: projections, snapshot, framework, plugins, assumed cache, queue, loop."""
