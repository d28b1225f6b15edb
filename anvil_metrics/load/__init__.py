"""What a run asks of the server: the scenario, its load, request bodies, the options."""
