"""Domain-free helpers whose results must not vary: atomic file writes (``atomic``: a reader never
sees half a file) and deterministic hash sampling (``sampling``: the same rows on every run).

Bottom floor of ``components/``: imports no other component package."""
