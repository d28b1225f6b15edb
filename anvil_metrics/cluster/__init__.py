"""Distributed runs: the master holds the budget and writes the files; the workers measure."""
