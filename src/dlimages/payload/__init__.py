"""What every image carries and runs on its own (stdlib only, Python 3.8): `dl_stack`'s facts, the `dl-smoke` test and
the `dl-bench` benchmark (dl_smoke.py and dl_bench.py, each with its parts beside it, dl_smoke_*.py and dl_bench_*.py,
and dl_workers.py and dl_command.py, which both share). The package reads `dl_stack`; nothing here imports the
package."""
