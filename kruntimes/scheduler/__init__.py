"""The pure scheduling core: projections, snapshot, plugin interface, planner, plugins, assumed cache, queue, loop."""
