"""Command-line interface: one module per command, `app` only dispatches."""
