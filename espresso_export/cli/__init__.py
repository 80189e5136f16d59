"""The ``espresso-export`` command line: thin commands over the library API."""
