"""The `judge` command line (main.py and its command groups) and its client of a judge server."""
