"""What each field of an `anvil-serving.benchmark/v1` document means, outside the catalogue.

Why one table per block, here: a reader of a benchmark file (or of the JSON Schema other
tools validate it with, `schemas/build.py`, or of `docs/fields.md`, generated from that)
needs each field's unit and definition, and the spec (`../shared/spec/benchmark-v1.md`)
names only the seeds' fields. The rows' fields and the `metrics` keys are defined in the
catalogue (`catalog.py`); every other field anvil writes is defined once below, keyed by the
name the writer uses: the run fields (`benchmark.py`, `schema.py`), a failure (`records.py`),
the `client` block (`saturation.py`, `live/loadwindow.py`), `load` (`loadblock.py`),
`steps[]` (`steps.py`), `goodput` (`goodput.py`) and `server` (`telemetry/servermetrics.py`).
The schema builder takes each block's properties from these tables and fails when a table
and its block's keys differ, so a field can neither go undefined nor be defined twice.

Each entry is `name: (unit, definition)`; the unit is "" where a field has none (a name, a
count of things that are not tokens, a flag).
"""

from __future__ import annotations

Text = dict[str, tuple[str, str]]  # field -> (unit, one-sentence definition)

RUN: Text = {
    "schema": ("", 'the document\'s kind and version, "anvil-serving.benchmark/v1"'),
    "run_id": ("", "benchmark-YYYYMMDDTHHMMSSZ of the run's start (UTC), with -2, -3 … when "
               "two runs start in the same second: unique per run"),
    "started_at": ("", "UTC ISO-8601 …Z wall-clock stamp of the run's start"),
    "finished_at": ("", "UTC ISO-8601 …Z wall-clock stamp of the run's end (the run_end "
                    "line's, else the last record's stamp); null only in a partial run"),
    "wall_clock_ms": ("ms", "monotonic duration of the measured run: from the first measured "
                      "request's start to the last one's end (or failure), gaps included, "
                      "warm-ups not; null without measured requests"),
    "requests": ("", "measured requests issued (completed + failed; warm-ups and requests "
                 "outside the measured window are not counted)"),
    "completed": ("", "measured requests that completed: the rows of request_timings"),
    "failed": ("", "measured requests that failed: the entries of failures"),
    "failures": ("", "one entry per failed measured request, in request_index order"),
    "concurrency": ("", "simultaneous streams (users) the load held; in a stepped run the "
                    "most any step held"),
    "context_tokens": ("tok", "the context window under test"),
    "max_context_tokens": ("tok", "the context limit: a planned prompt plus max_tokens must "
                           "fit in it"),
    "context_distribution": ("", "planned prompt size in tokens (a decimal string) → "
                             "requests at that size, as the scenario planned them; for a run "
                             "without a request budget whose scenario gave none, the measured "
                             "requests issued at each size"),
    "context_seed": ("", "the seed that makes the run's prompts reproducible"),
    "max_tokens": ("tok", "the completion cap sent with each request"),
    "model": ("", "the model measured, as given by the user or discovered from the server; "
              "null when unknown"),
    "engine": ("", "the serving engine, as given or discovered; null when unknown"),
    "gpu": ("", "the accelerator the server ran on, as given; null when unknown"),
    "tier": ("", "the serving tier, as given; null when unknown"),
    "manifest": ("", "the deployment manifest, as given; null when unknown"),
    "source_recipe": ("", "the recipe the server was built from, as given; null when unknown"),
    "base_url": ("", "the endpoint the run measured, with any user:password@ removed"),
    "measurement_protocol": ("", "the name of the scenario (protocol) that produced the run"),
    "run_nonce": ("", "the random value that makes this run's prompts unique, so a rerun "
                  "with the same seed does not hit a server's prefix cache"),
    "serve_flags": ("", "the request-side switches the scenario set, reported as given"),
    "timing_methodology": ("", "the definitions of the clock and of each timing metric in "
                           "words: key → sentence"),
    "request_timings": ("", "one row per completed measured request, in request_index order"),
    "metrics": ("", "the aggregates over request_timings (nearest-rank percentiles, sums, "
                "counts and rates)"),
    "partial": ("", "true when the run did not do what it planned: it was ended by a "
                "signal or aborted (ended_by), or the file was rebuilt from the raw records "
                "of a run that did not finish"),
    "ended_by": ("", "why the run ended: requests (its measured requests were all done), "
                 "duration (its duration was over), stopped (Locust stopped it: the web UI's "
                 "stop, its -t, a shape's end), signal (SIGINT or SIGTERM), aborted (anvil "
                 "ended it: the server stopped answering); null when the run did not finish "
                 "(no run_end line) or the file predates the field"),
    "end_reason": ("", "for a run ended by a signal or aborted, one line saying what "
                   "happened (which signal; which server stopped answering, when and how); "
                   "else null"),
    "warmup_requests": ("", "the raw file's requests left out of the measurement: the "
                        "warm-up requests run before measuring and, with --warmup/--cooldown, "
                        "those started outside the window (load.outside_window); they are in "
                        "requests.jsonl, not in request_timings, failures or the counts"),
    "client": ("", "the load generator's own health over the load, so that its delays are "
               "not taken for the server's; null when not measured"),
    "prompt_calibration": ("", "how planned prompt sizes were matched to the server's token "
                           "count, and the worst miss"),
    "shared_prefix": ("", "{prefix_tokens, group_size} when serve_flags.shared_prefix_burst "
                      "is true, else null"),
    "goodput": ("", "the requests meeting every goodput criterion the run was given; absent "
                "without criteria"),
    "load": ("", "how load was offered (closed or open loop) and what the run achieved of it; "
             "absent in files from before the block"),
    "steps": ("", "one block per step of a stepped run (a sweep or a load shape); a request "
              "belongs to the step in force when it started; absent without steps"),
    "server": ("", "what the server's metrics endpoint said about itself over the measured "
               "window; absent in files from before the block"),
    "conversation": ("", "a multi-turn run's conversations and each turn's figures; absent "
                     "without a [conversation]"),
    "endpoint": ("", "what the requests were posted to: chat (/v1/chat/completions), "
                 "completions (/v1/completions, a text prompt sized without a chat "
                 "template), responses (/v1/responses, streamed events) or embeddings "
                 "(/v1/embeddings, one answer, no output: its rows have no time to first "
                 "output); absent in files from before it (chat)"),
    "prompt_ids": ("", "true when each prompt was sent as the server's token ids "
                   "(--prompt-ids: exactly the planned count); absent otherwise"),
    "cancel": ("", "the requests closed on purpose (--cancel-rate, [cancel]): how many and "
               "where (post/cancelblock.py); absent without cancellation"),
    "mix": ("", "a request mix's classes and models: each one's share beside its planned "
            "share, and its own latencies (post/mixblock.py); absent without "
            "[[request_class]] or [models]"),
    "trace": ("", "a replayed trace: what was replayed, and the prefix reuse it allows beside "
              "the server's; absent without --trace"),
    "steady_state": ("", "did the run reach a steady state: the plateau of its load and whether "
                     "its latencies held there (post/steady.py); null in a stepped run; "
                     "absent in a file written before anvil had it"),
    "dataset": ("", "{file, format, entries}: the prompts came from this dataset file (their "
                "sizes are the server's counts, planned_context_tokens null); absent without "
                "--dataset"),
    "request_headers": ("", "the extra HTTP headers sent with every request (--header, the "
                        "scenario's [headers]), name → value, a credential's value (a name "
                        "holding auth, key, token, secret, passw, cookie or credential) "
                        "\"[redacted]\"; absent without any"),
}

FAILURE: Text = {
    "request_index": ("", "the failed request's place in the measured order, numbered "
                      "densely with the rows'"),
    "kind": ("", "why it failed, one of the failure kinds"),
    "http_status": ("", "the response's HTTP status when one was received, else null"),
    "message": ("", "what went wrong in words (the server's own message where it sent one)"),
    "phase": ("", "where the request was when it failed (connect, headers, prefill, decode); "
              "null when unknown"),
    "step": ("", "the step in force when the request started (stepped runs only)"),
}

CLIENT: Text = {
    "loop_lag_ms": ("ms", "how late the load process's event loop woke from a 1 ms sleep, "
                    "over the load (a distributed run: the worst worker's, by p99)"),
    "cpu_pct": ("%", "CPU time of the load process over the load's wall time, in percent of "
                "one core (distributed: the highest worker's)"),
    "achieved_concurrency": ("", "Σ measured request durations / wall_clock_ms: the "
                             "time-averaged number of requests in flight (Little's law)"),
    "saturated": ("", "true when loop lag p99 > 10 ms or CPU > 90 % of a core: the generator, "
                  "not the server, may have set the figures; null when neither was measured"),
    "verdict": ("", '"ok", "not measured" or "saturated: <why>" — what saturated says, in '
                "words"),
    "start_delay_ms": ("ms", "nearest-rank figures of how late each measured request was "
                       "written after it was due (its user free and its ticket handed out)"),
}
LOOP_LAG: Text = {
    "p50": ("ms", "nearest-rank median wake-up lateness (the upper edge of its 10 µs "
                  "bucket); null without samples"),
    "p99": ("ms", "nearest-rank 99th percentile wake-up lateness; null without samples"),
    "max": ("ms", "the latest wake-up; null without samples"),
    "samples": ("", "wake-ups measured"),
    "over_5ms": ("", "wake-ups later than 5 ms"),
    "max_at_s": ("s", "when the latest wake-up happened, seconds into the load"),
    "stalls": ("", "the first 20 wake-ups later than 5 ms, each [seconds into the load, ms "
               "late]"),
}
START_DELAY: Text = {
    "p50": ("ms", "nearest-rank median start delay"),
    "p99": ("ms", "nearest-rank 99th percentile start delay"),
    "max": ("ms", "the largest start delay"),
}
CALIBRATION: Text = {
    "method": ("", "how prompts were sized: the server's /tokenize, probe requests, a local "
               "tokenizer, or none"),
    "planned_vs_counted_error_pct_max": ("%", "max over rows with both of |prompt_tokens − "
                                         "planned_context_tokens| / planned × 100; null when "
                                         "no row has both"),
}
SHARED_PREFIX: Text = {
    "prefix_tokens": ("tok", "the shared text's size as a lone chat prompt"),
    "group_size": ("", "requests per group sharing one prefix"),
}
SERVE_FLAGS: Text = {
    "no_thinking": ("", 'true when thinking_mode is "off" (the older spelling)'),
    "reasoning_effort": ("", 'the reasoning_effort sent with each request ("low", "medium", '
                         '"high"); null for none'),
    "shared_prefix_burst": ("", "true when requests come in groups that share a prefix "
                            "(shared_prefix says its size)"),
    "thinking_mode": ("", 'whether the request asks the model to think: "default" (not '
                      'said), "on" or "off"'),
}

LOAD: Text = {
    "mode": ("", '"budget" (a request count ended the run; a duration, if any, was a time '
             'limit), "duration" or "until_stopped"'),
    "arrival": ("", '"closed" (users back to back) or the open-loop arrival process: '
                '"poisson", "gamma" or "constant"'),
    "offered_rate_rps": ("req/s", "the open-loop schedule's rate; null in a closed loop"),
    "achieved_rate_rps": ("req/s", "(n − 1) / (last start − first start) over the measured "
                          "requests, completed and failed: the rate they were written at"),
    "burstiness": ("", "the gamma process's shape (1.0 for poisson); null for closed and "
                   "constant arrivals"),
    "duration_s": ("s", "the duration the run asked for; null without one"),
    "window_s": ("s", "[first start, last end] of the measured requests, seconds after the "
                 "run's header — or the --warmup/--cooldown window itself"),
    "schedule_lag_ms": ("ms", "nearest-rank figures of the rows' schedule_lag_ms (open loop; "
                        "null in a closed loop, where client.start_delay_ms says it)"),
    "waited_for_user": ("", "measured requests that fell due while every user was busy (open "
                        "loop; null in a closed loop)"),
    "cancelled": ("", "measured requests stopped by the run's end (a duration, Stop, Ctrl-C) "
                  'after --stop-timeout: the failures of kind "cancelled"'),
    "outside_window": ("", "{warmup, cooldown}: requests that started outside the measured "
                       "window (in requests.jsonl, not in the document); null without one"),
}
SCHEDULE_LAG: Text = {
    "p50": ("ms", "nearest-rank median schedule lag"),
    "p99": ("ms", "nearest-rank 99th percentile schedule lag"),
    "max": ("ms", "the largest schedule lag"),
}
OUTSIDE_WINDOW: Text = {
    "warmup": ("", "measured requests that started in the warm-up window"),
    "cooldown": ("", "measured requests that started in the cool-down window"),
}

CONVERSATION: Text = {
    "plan": ("", "the [conversation] table as checked: turns, turn_tokens, "
             "system_prompt_tokens, prefix_tokens, think_time, history, session_header, seed"),
    "conversations": ("", "conversations with at least one answered turn"),
    "completed": ("", "of those, the conversations whose every drawn turn was answered"),
    "cut": ("", "the others: the run ended, or a turn failed, before their last turn"),
    "expected_reuse": ("", "Σ history_tokens / Σ prompt_tokens over the rows with both (a "
                       "first turn's history is 0): the share of prompt tokens a prefix "
                       "cache could serve from the conversation's own earlier turns"),
    "reported_reuse": ("", "Σ cached_tokens / Σ prompt_tokens over the rows reporting "
                       "cached_tokens: the share the server says it served from its cache; "
                       "null when no row reports it"),
    "turns": ("", "one block per turn number, from 1"),
}

DATASET: Text = {
    "file": ("", "the dataset file's name (its folder is not recorded)"),
    "format": ("", "sharegpt, jsonl or text as --dataset-format gave it; null: told by the "
               "file"),
    "entries": ("", "the usable entries it holds (request k sends entry k mod entries)"),
}

TRACE: Text = {
    "file": ("", "the trace file's name (its folder is not recorded)"),
    "format": ("", "mooncake, burstgpt or jsonl as --trace-format gave it; null: detected"),
    "speed": ("", "--trace-speed: the trace replayed this many times faster"),
    "limit": ("", "--trace-limit: only this many of its first requests; null: all"),
    "block_tokens": ("tok", "tokens per hash id block (--trace-block)"),
    "model": ("", "--trace-model: the BurstGPT rows kept; null: all"),
    "window_s": ("s", "--trace-window: [start, end] seconds after the trace's first request "
                 "(end null: to its end); null: all"),
    "requests": ("", "the trace's requests replayed"),
    "expected_reuse": ("", "the share of the replayed input tokens a cache keeping every "
                       "block could serve, from the trace's own sharing"),
    "reported_reuse": ("", "Σ cached_tokens / Σ prompt_tokens over the rows reporting "
                       "cached_tokens; null when none does"),
}

STEADY_STATE: Text = {
    "verdict": ("", "steady (the load held its level over at least half the run and no "
                "latency moved), drifting (it held, but a latency moved) or no_plateau"),
    "reason": ("", "what the verdict rests on, in one sentence"),
    "level_kind": ("", "in_flight (a closed loop: requests in flight, time-averaged per bin) "
                   "or arrival_rate_rps (an open loop: requests started per second)"),
    "level": ("", "the plateau's level: the median of the 20 bins' loads"),
    "window_s": ("s", "[start, end] of the plateau, seconds after the run's header"),
    "share": ("", "the plateau's fraction of the run's span"),
    "requests": ("", "completed requests that started in the plateau"),
    "metrics": ("", "per latency (ttft_ms, mean_inter_token_latency_ms, e2e_ms) over the "
                "plateau's requests; null with fewer than 8 values"),
}

STEADY_METRIC: Text = {
    "p50": ("ms", "nearest-rank p50 over the plateau's requests"),
    "p95": ("ms", "nearest-rank p95 over the plateau's requests"),
    "p99": ("ms", "nearest-rank p99 over the plateau's requests"),
    "quarters_p50": ("ms", "nearest-rank p50 of each quarter of the plateau's requests, in "
                     "start order"),
    "shift_pct": ("%", "the quarter p50 furthest from the plateau's p50, relative to it"),
    "p_value": ("", "Mann-Whitney U p of that quarter's values against the other quarters'"),
    "moved": ("", "some quarter's p50 is more than 10 % from the plateau's with p < 0.001"),
}

MIX: Text = {
    "plan": ("", "the [[request_class]] tables (as request_class), the [models] table and the "
             "draws' seed (the scenario's context_seed), as checked (load/mix.py)"),
    "classes": ("", "one block per request class, in the plan's order; [] without classes"),
    "models": ("", "one block per model a request may name ([models]' names, then the "
               "classes' own); [] without models"),
}

CANCEL: Text = {
    "plan": ("", "{rate, after, seed}: the fraction of measured requests closed on purpose, "
             "when (prefill, decode, or ms after the start) and the draw's seed "
             "(load/cancel.py)"),
    "aborted": ("", "measured requests closed on purpose: failures[] of kind aborted"),
    "share": ("", "aborted / requests; null without requests"),
    "phases": ("", "aborted by the phase each was in when closed: headers, prefill, decode"),
}

CANCEL_PHASES: Text = {
    "headers": ("", "closed before the response head arrived (a delay in ms)"),
    "prefill": ("", "closed before the first output: written and not yet answered"),
    "decode": ("", "closed after the first output"),
}

MIX_GROUP: Text = {
    "name": ("", "the class's (model's) name"),
    "expected_share": ("", "its planned probability for one request: weight / Σ weights for a "
                       "class; for a model, its assignment's probability, a class's own model "
                       "counted in that class's share"),
    "requests": ("", "completed requests of it"),
    "share": ("", "requests / the completed requests that have a class (a model); null when "
              "none has"),
    "ttft_p50_ms": ("ms", "nearest-rank p50 of its rows' ttft_ms"),
    "ttft_p95_ms": ("ms", "nearest-rank p95 of its rows' ttft_ms"),
    "e2e_p50_ms": ("ms", "nearest-rank p50 of its rows' e2e_ms"),
    "e2e_p95_ms": ("ms", "nearest-rank p95 of its rows' e2e_ms"),
    "prompt_tokens_mean": ("tok", "mean prompt_tokens of its rows that have it"),
    "output_tokens_mean": ("tok", "mean output_tokens of its rows"),
}

CONVERSATION_TURN: Text = {
    "turn": ("", "the user turn, from 1"),
    "requests": ("", "completed requests of this turn"),
    "ttft_p50_ms": ("ms", "nearest-rank p50 of the turn's ttft_ms"),
    "ttft_p95_ms": ("ms", "nearest-rank p95 of the turn's ttft_ms"),
    "e2e_p50_ms": ("ms", "nearest-rank p50 of the turn's e2e_ms"),
    "e2e_p95_ms": ("ms", "nearest-rank p95 of the turn's e2e_ms"),
    "prompt_tokens_mean": ("tok", "mean usage.prompt_tokens of the turn's rows that have it"),
    "history_tokens_mean": ("tok", "mean history_tokens of the turn's rows that have it"),
    "cached_tokens_mean": ("tok", "mean cached_tokens of the turn's rows that report it"),
    "expected_reuse": ("", "expected_reuse over the turn's rows"),
    "reported_reuse": ("", "reported_reuse over the turn's rows"),
}

STEP: Text = {
    "step": ("", "the step's index, from 0"),
    "users": ("", "the users the step held (a users sweep or a load shape)"),
    "rate": ("req/s", "the step's open-loop rate (a rate sweep)"),
    "started_s": ("s", "when the step began, seconds after the run's header"),
    "ended_s": ("s", "when the step ended, seconds after the run's header: where the next "
                "began, or at the step_end line, or at the last measured request's end if the "
                "run stopped first"),
    "requests": ("", "measured requests that started in the step"),
    "completed": ("", "the step's requests that completed"),
    "failed": ("", "the step's requests that failed"),
    "metrics": ("", "the metrics block over the step's rows, with (ended_s − started_s) · "
                "1000 as its wall clock"),
    "goodput_rps": ("req/s", "the step's requests meeting every goodput criterion per second "
                    "of the step; null without criteria"),
}

GOODPUT: Text = {
    "criteria": ("", "the criteria as text, each <row field> <op> <number>, e.g. "
                 "ttft_ms<=2000"),
    "met": ("", "measured requests that completed with every named field present and within "
            "its bound"),
    "fraction": ("", "met / requests; null without requests"),
}

SERVER: Text = {
    "engine": ("", "the engine whose metrics were read (given, discovered, or told by the "
               "metric names); null when unknown"),
    "version": ("", "the engine's version as the server reported it; null when unknown"),
    "max_model_len": ("tok", "the server's context limit; null when it does not say"),
    "metrics_url": ("", "where the metrics were scraped; null when they were not"),
    "samples": ("", "successful scrapes from the first mark to the last, inclusive"),
    "requests": ("", "Δ end-to-end histogram count: requests the server finished in the "
                 "window (other clients' included)"),
    "spec_decode": ("", "speculative decoding over the window; null when the server reported "
                    "none (speculation off)"),
    "requests_running": ("", "the running-requests gauge over the window's samples"),
    "requests_waiting": ("", "the waiting (queued) requests gauge over the window's samples"),
    "kv_cache_usage": ("ratio", "the KV-cache usage gauge (0-1) over the window's samples"),
    "prefix_cache_hit_rate": ("ratio", "Δ prefix-cache hits / Δ queries over the window "
                              "(SGLang: its hit-rate gauge's median)"),
    "ttft_ms_mean": ("ms", "Δ_sum / Δ_count of the server's time-to-first-token histogram"),
    "e2e_ms_mean": ("ms", "Δ_sum / Δ_count of the server's end-to-end latency histogram"),
    "queue_time_ms_mean": ("ms", "Δ_sum / Δ_count of the server's queue-time histogram"),
    "prompt_tokens_mean": ("tok", "Δ_sum / Δ_count of the server's prompt-token histogram "
                           "(or Δ prompt tokens / requests where it has counters)"),
    "generation_tokens_mean": ("tok", "Δ_sum / Δ_count of the server's generation-token "
                               "histogram (or Δ tokens / requests where it has counters)"),
    "client_minus_server_ms": ("ms", "the client's mean over the measured completed requests "
                               "minus the server's mean over the window"),
    "effective_prefill_excl_queue_tok_s": ("tok/s", "Σ prompt tokens / Σ (time to first "
                                           "chunk − the server's mean queue time) over the "
                                           "rows that have both: prefill without "
                                           "queueing; null when client_minus_server_ms."
                                           "first_chunk_vs_ttft < 0 (a role-only chunk sent "
                                           "before prefill)"),
    "null_reasons": ("", "member → why it is null (and scrapes, metrics, counters: what went "
                     "wrong with the samples)"),
}
GAUGE: Text = {
    "p50": ("", "nearest-rank median of the samples"),
    "max": ("", "the largest sample"),
}
SPEC_DECODE: Text = {
    "acceptance_rate": ("ratio", "Δ accepted tokens / Δ draft tokens (SGLang: its gauge's "
                        "median)"),
    "accepted_length": ("tok", "1 + Δ accepted tokens / Δ drafts, the bonus token counted "
                        "(SGLang: its gauge's median)"),
    "acceptance_rate_range": ("ratio", "[min, max] of SGLang's acceptance-rate gauge "
                              "(gauges only)"),
    "accepted_length_range": ("tok", "[min, max] of SGLang's accepted-length gauge (gauges "
                              "only)"),
    "drafts": ("", "Δ drafts proposed (counters; null from gauges)"),
    "draft_tokens": ("tok", "Δ draft tokens proposed (counters; null from gauges)"),
    "accepted_tokens": ("tok", "Δ draft tokens accepted (counters; null from gauges)"),
    "source": ("", '"counters" (differenced over the window) or "gauges" (sampled)'),
}
CLIENT_MINUS_SERVER: Text = {
    "first_chunk_vs_ttft": ("ms", "mean time_to_first_chunk_ms minus the server's mean "
                            "time to first token"),
    "e2e": ("ms", "mean e2e_ms minus the server's mean end-to-end latency"),
}
