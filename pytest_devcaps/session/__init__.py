"""The pytest glue: options with their sources, the per-session state, fixtures, parametrization,
the suite hooks, ``--devcaps-require``, the terminal and JSON reporting, plan mode and config-time
warnings. ``plugin.py`` is the entry point that wires these into pytest."""
