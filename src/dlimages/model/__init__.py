"""The matrix and what follows from it, pure (no command runs here): `spec` loads and validates matrix.yaml, `compat`
judges a candidate, `cells` expands, `tags`, `selection` and `tables` name, pick and show cells, `doctor` says which
cells run on a GPU node."""
