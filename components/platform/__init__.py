"""Where a run happens: typed settings and the one reader of ``params.yaml`` (``config``), the
embedded services' process environment, the one Ray start-up and child processes (``runtime``).

Bottom floor of ``components/``: imports no other component package."""
