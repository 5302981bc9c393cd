"""``python -m openbook``: the same command line as the ``openbook`` script."""

from openbook.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
