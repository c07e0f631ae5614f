"""What every image carries and runs on its own (stdlib only, Python 3.8): `dl_stack`'s facts, the `dl-smoke` test and
the `dl-bench` benchmark. The package reads `dl_stack`; nothing here imports the package."""
