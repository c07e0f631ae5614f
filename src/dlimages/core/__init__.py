"""What every wing stands on, knowing nothing of the matrix: input problems (`errors`), the grammars every outside
value passes (`grammar`, `references`), whole-file writes (`files`), the one runner of commands (`runner`) and the
command lines people type (`usage`)."""
