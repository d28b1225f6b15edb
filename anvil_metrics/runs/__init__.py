"""A run as a process: anvil inside Locust, and Locust started for `anvil run`.

`plugin.py` is what Locust loads (options, and the hooks that start and end a local or a
distributed session), with `locustfix.py`'s repairs to Locust and `stopsignals.py`'s Ctrl-C
and SIGTERM; `launch.py` starts Locust as a child for `anvil run` (`locustmain.py`, sooner
than `python -m locust`), `capacity.py` one run per step for `anvil capacity`, and
`simproc.py` the built-in simulator as a child.
"""
