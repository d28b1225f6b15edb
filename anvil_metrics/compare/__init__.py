"""Runs side by side (`anvil compare`): `runs` computes, `text` writes the lines.

`RESAMPLES` is here, with no import, so the command's flag can show its default without
loading numpy for every other `anvil` command."""

RESAMPLES = 1_000  # bootstrap resamples per figure and run
