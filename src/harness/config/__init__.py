"""Where the config lives and how it is checked before a run starts."""
