"""`anvil report PATH`: a run, a sweep, a capacity search or a campaign as pictures.

Why pictures, and why these rules: latency is read from plots, not tables (vLLM's bench
plots, GuideLLM's HTML report, AIPerf's plots), but a picture is only worth promoting a
model on if its numbers are the ones `anvil verify` checks. So:

- every value drawn is computed by the package's own path — a run's rows come from
  `requests.jsonl` through `benchmark.build` (the catalogue's formulas, the same call
  `anvil postprocess` makes), and the report refuses a folder whose `benchmark.json`
  does not hold the same `metrics`; a sweep's, capacity search's and campaign's figures
  are read from the files `anvil verify` recomputes (`steps[]`, `capacity.json` and each
  step's `benchmark.json`, `summary.json`);
- the page names the files it was made from (path, bytes, SHA-256) and the anvil version
  and commit that made it, and each figure says which file it shows;
- it is one self-contained `report.html` (the PNGs inlined as `data:` URIs, no script, no
  font or style fetched from anywhere) with the PNGs beside it, drawn with matplotlib's
  headless Agg backend (the optional extra `[report]`; nothing else of anvil imports it);
- the rows stay columns (numpy): a run of a million requests is drawn without a Python
  object per request.

Modules: `draw` (matplotlib set-up and shared plot helpers), `page` (the page's plain
data — figures, tables, sections — and its HTML), `runfigs` (a run's figures, a sweep's
steps among them), `capacityfigs`, `campaignfigs`, and `build` (which kind a folder is, and
the files written).
"""
