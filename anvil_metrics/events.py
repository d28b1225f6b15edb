"""anvil's own Locust events: the moments of a stream that a locustfile can hook.

Locust's `request` event knows one duration per request; an LLM stream has several
moments. anvil declares them as `locust.event.EventHook`s, documented like
`locust/event.py`, and its own recorder is only a listener on `request_record`, so a user's
locustfile can observe the same moments the same way::

    from anvil_metrics.events import anvil_events

    @anvil_events.first_content.add_listener
    def on_first_content(request_index, t_ns, **kw):
        ...

Listeners run on the gevent hub inside the stream's greenlet: keep them short (no I/O on
`first_output` / `first_content`), or they delay the very stream they observe.
"""

from __future__ import annotations

from locust.event import EventHook


class AnvilEvents:
    first_output: EventHook
    """
    Fired when a stream's first non-empty reasoning or content delta arrives.

    Event arguments:

    :param request_index: the request's 0-based index in the run (warm-up requests have
        their own sequence and `warmup=True`)
    :param t_ns: `time.perf_counter_ns()` at arrival
    :param start_ns: `time.perf_counter_ns()` just before the request was sent
    :param warmup: whether this is a warm-up request
    """

    first_content: EventHook
    """
    Fired when a stream's first non-empty `delta.content` arrives (the TTFT moment).

    Event arguments: as `first_output`.
    """

    stream_end: EventHook
    """
    Fired when a stream ends, cleanly or not, before its record is written.

    Event arguments:

    :param record: the `anvil_metrics.records.RequestRecord`
    """

    request_record: EventHook
    """
    Fired once per issued request with its finished raw record. anvil's recorder listens
    here and appends it to `requests.jsonl`.

    Event arguments:

    :param record: the `anvil_metrics.records.RequestRecord`
    """

    job_end: EventHook
    """
    Fired once per agent job when its last session has ended (`live/users.py`; on a
    distributed master, when a worker says so), whether or not it completed.

    Event arguments:

    :param job: the run's job number (the records' `extra.job`)
    :param answered: how many of the job's measured requests were answered (each has a
        record)
    :param completed: every request of the job was sent and answered (it was not stopped)
    """

    run_finished: EventHook
    """
    Fired once the run's raw file is closed and `benchmark.json` written.

    Event arguments:

    :param run_dir: the run's folder (`pathlib.Path`)
    :param benchmark_path: path of `benchmark.json`, or None if it could not be built
    """

    def __init__(self) -> None:
        for name, value in AnvilEvents.__annotations__.items():
            if value in ("EventHook", EventHook):
                setattr(self, name, EventHook())


anvil_events = AnvilEvents()
