"""After the run: `requests.jsonl` becomes `benchmark.json`, and `anvil verify` checks it.

Everything here reads files and the field rules, never a live object, so `anvil postprocess`
and `anvil verify` work on any run folder without gevent or Locust. The raw records become
integer columns (`rawcolumns.py`, read by `rawpart.py`), the rows are derived with the
catalogue's formulas (`derive.py`) and aggregated (`stats.py`), each optional block is built
by its own module, the document is assembled (`benchmark.py`) and written (`rowjson.py`),
and `verify.py` recomputes a document from its own rows, bit for bit.
"""
