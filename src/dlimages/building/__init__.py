"""From a rendered cell to a tagged image: the engine and its disk, where bases come from and the offline base,
mirrors, the exact argv (`plan`), bake files, running builds with progress, what a failed build says (`advice`), and
the ledger of what was built."""
