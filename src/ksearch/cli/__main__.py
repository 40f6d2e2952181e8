"""`python -m ksearch.cli ...`: the same as the `ksearch` script."""

from ksearch.cli.app import main

main()
