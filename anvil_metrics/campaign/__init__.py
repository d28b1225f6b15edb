"""`anvil campaign run`: many runs of several variants, toward one promotion decision.

A campaign file (`spec.py`, checked whole before its first run) names the variants (model ×
speculation) and their servers, how many runs each gets and in what order, the gates the
decision asks for and the checks to run. `plan.py` lays out its runs, `runner.py` does them,
resumably, into one folder whose `campaign.json` holds each run's state, `checkplan.py` runs
the `[checks]` suites once per variant and `restoration.py` asks the serving aliases to
answer after the last run. Turning that folder into a summary is `summary/`'s job.
"""
