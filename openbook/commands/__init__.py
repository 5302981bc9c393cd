"""Command groups of the `openbook` command line (one module per group, registered in openbook/cli.py)."""
