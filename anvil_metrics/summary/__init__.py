"""`anvil summarize`: a campaign's runs folded into one public summary and its decision.

`folder.py` reads a campaign folder (only runs whose `benchmark.json` verifies) and writes
`anvil-serving.public-benchmark-summary/v1` and `summary.md` (`markdown.py`); `decide.py`
computes the figures, gates and decision, `functional.py` the functional and multimodal
blocks from the checks; `verify.py` recomputes a summary from its runs, and `fields.py` says
what each of its fields means.
"""
