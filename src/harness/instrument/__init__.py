"""Leave-in instrumentation: marks in user code that cost nothing (and import nothing) until a
preset switches them on."""
