"""verify's tests (a package: its module names do not clash with other folders' tests)."""
