"""`anvil export`: a finished run in the formats other tools read.

`parquet.py` writes the per-request rows as one Parquet table, typed as the catalogue types
them; `vllmjson.py` writes the run as `vllm bench serve --save-result` would, by vLLM's own
definitions (so a dashboard never plots two definitions under one name). Both start from
the run's `benchmark.json`; vLLM's per-token gaps come from its `requests.jsonl`.
"""
