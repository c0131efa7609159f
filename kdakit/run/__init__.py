"""`kdakit run`: a run from its id to its report, on either scheduler (README.md, "A run's flow")."""
