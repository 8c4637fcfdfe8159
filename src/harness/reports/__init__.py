"""Writing reports to disk and to the terminal."""
