"""anvil's built-in simulator: an OpenAI-compatible server whose timing is exact.

Start it with ``python -m anvil_metrics.sim`` (or ``anvil sim``); `server.main` is the entry
point. `tokenizer.count_chat_tokens` / `count_text_tokens` give the prompt sizes it reports.
"""
