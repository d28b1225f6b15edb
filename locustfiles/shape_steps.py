"""A LoadTestShape with anvil: users step up, and anvil records each step.

    locust -f locustfiles/shape_steps.py --headless -H http://127.0.0.1:8000

Locust's own way to change the load over time (a `LoadTestShape`; see Locust's docs on
custom load shapes). anvil sees every change of the user count and writes it as a step
(`steps[]` in benchmark.json: each request belongs to the step in force when it started),
as it does for `--steps 1,4,16 --step-duration 60s`, which needs no shape class. Copy this
file and edit `STAGES` to make your own; the run ends when `tick` returns None.
"""

from locust import LoadTestShape

from anvil_metrics.runs.locustfile import ChatUser  # noqa: F401


class StepShape(LoadTestShape):
    """`STAGES`: (seconds from the start, users) — each stage lasts until the next."""

    STAGES = ((0, 1), (20, 4), (40, 16))
    END_S = 60

    def tick(self) -> tuple[int, float] | None:
        t = self.get_run_time()
        if t >= self.END_S:
            return None
        users = [u for start, u in self.STAGES if t >= start][-1]
        return users, float(users)
