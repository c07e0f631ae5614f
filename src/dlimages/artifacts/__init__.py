"""What one stage hands the next, pure (no command runs): the repository's layout (`layout`), the Python locks
(`pythonlock`), the OS package locks (`oslock`), the base digests (`baseslock`) and the build ledger (`ledger`), each
read, written and judged stale here. The stages (generate, building, publish, repro, gpu) import this wing, never
each other."""
