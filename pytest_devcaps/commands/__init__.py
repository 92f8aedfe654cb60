"""The ``devcaps`` command: ``main`` parses arguments and dispatches to probe (the table, explain),
check, lint and report."""
