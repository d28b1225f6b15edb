"""Before the load: who the server is, how it counts tokens, and prompts of a planned size.

A prefill figure is only as good as the prompt size it is divided by, so prompts are sized by
the server's own count (`counting.py`, `prompts.py`, `turns.py`, `traceprompts.py`), the
calibration remembered (`calcache.py`), and the server asked which model it serves and what
it is (`model.py`, `provenance.py`). `anvil prompts` (`sizing.py`) shows how close it comes.
Nothing here knows about a run's plan.
"""
