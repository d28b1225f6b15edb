"""The `anvil` command: its flags, every line it prints and every exit code.

The only folder that prints. `main.py` dispatches to one module per command group; each reads
its flags (`parsing.py`: a mistake is one line and exit 2), calls the layers below, and
prints what they return. An `AnvilError` raised anywhere below becomes one line and its exit
code, never a traceback.
"""
