"""One run in one Locust process: tickets, users, records, live figures and the web UI."""
