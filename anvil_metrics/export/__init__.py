"""`anvil export`: a finished run in the formats other tools read.

`parquet.py` writes the per-request rows as one Parquet table, typed as the catalogue types
them; `vllmjson.py` writes the run as `vllm bench serve --save-result` would, by vLLM's own
definitions (so a dashboard never plots two definitions under one name); `llmd.py` writes
it as llm-d's Benchmark Report v0.2.1, field by field from one table. All start from
the run's `benchmark.json`; vLLM's per-token gaps come from its `requests.jsonl`.
"""
