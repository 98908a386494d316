"""Entry points only: nothing here is imported by the library."""
