"""The server's own view: its `/metrics`, sampled beside the load and summed up afterwards.

A child process scrapes and writes every sample (`scrape.py`), so a large or hanging
exposition never delays a stream's stamps; `sampler.py` is the load process's handle on it,
`livegauges.py` the web UI's view of the newest samples, `engines.py` each engine's metric
names, and `servermetrics.py` the benchmark's `server` block over the measured window.
"""
