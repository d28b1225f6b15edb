"""What each field of an `anvil-serving.public-benchmark-summary/v1` document means.

Why one table per block, here: the spec (`../shared/spec/public-summary-v1.md`) defines the
example's members; anvil writes more (the rows' intervals and counts, the gates, the
statistics, the campaign) and a reader needs each one's unit and definition. Each field is
defined once below, keyed by the name its writer uses — `decide.py` (rows, telemetry,
protocol, gates, statistics), `functional.py` (`functional`, `multimodal`), `folder.py` (the
document, `restoration`, `not_included`, `campaign`) — and the schema builder
(`schemas/build.py`) takes each block's properties from these tables and fails when a table
and its block's keys differ. `docs/fields.md` is generated from the schema.

Each entry is `name: (unit, definition)`; the unit is "" where a field has none.
"""

from __future__ import annotations

from anvil_metrics import summaryfigures

Text = dict[str, tuple[str, str]]  # field -> (unit, one-sentence definition)

TOP: Text = {
    "schema": ("", 'the document\'s kind and version, '
               '"anvil-serving.public-benchmark-summary/v1"'),
    "date": ("", "the UTC day (YYYY-MM-DD) the campaign's last run finished (or started); "
             "null when no run carries a time"),
    "decision": ("", '"promotion" when every gate passed or was not required (one passed), '
                 'else "no-promotion"; null when no gate was given or required'),
    "performance_protocol": ("", "the scenario every performance run used, from the runs "
                             "themselves (each figure null, with the reason, where they "
                             "disagree)"),
    "performance": ("", "one row per (model, speculation) variant: means over its runs"),
    "sampled_speculative_telemetry": ("", "one row per variant with speculation on: min–max "
                                      "over its runs of the server's speculative-decoding "
                                      "figures"),
    "checks_under_load": ("", "one row per variant whose runs have a check class (a "
                          "[[request_class]] with check = ...): each class's answers judged "
                          "under load, pooled over the variant's runs; absent when no run "
                          "has one"),
    "functional": ("", "the functional checks per model (its variants combined: a check "
                   "passes for a model only if it passed with speculation on and off); "
                   "absent when not measured"),
    "multimodal": ("", "the image and OCR checks per model and what they do not cover; "
                   "absent when not measured"),
    "retained_failures": ("", "every failure met during the campaign that did not "
                          "invalidate it, one sentence each: nothing is silently dropped"),
    "restoration": ("", "after the last run, whether the serving aliases answered again; "
                    "absent when not checked"),
    "gates": ("", "each gate of the campaign with its outcome and the figures it used"),
    "decision_reasons": ("", "why the decision is what it is, one sentence per gate that "
                         "decided it"),
    "statistics": ("", "how the deltas, intervals and p-values were computed, with the "
                   "bootstrap's seed and resamples (verify recomputes with them)"),
    "not_included": ("", "block → why it is left out of the document (not measured), never "
                     "filled with guesses"),
    "campaign": ("", "which campaign the summary is of, and where its runs are"),
}

PROTOCOL: Text = {
    "requests_per_run": ("", "the runs' requests, when they agree"),
    "runs_per_model": ("", "runs per variant, when the variants agree"),
    "concurrency": ("", "the runs' concurrency, when they agree"),
    "configured_input_tokens": ("tok", "the one planned prompt size of the runs' "
                                "context_distribution, when they agree"),
    "max_output_tokens": ("tok", "the runs' max_tokens, when they agree"),
    "aggregation": ("", "how a row's figures come from its runs, in words (with the "
                    "placements' labels when given)"),
    "null_reasons": ("", "figure → why it is null (the runs do not agree, or there are none)"),
}

def _figure_rows() -> Text:
    """The performance row's figures and their deltas, worded from `SUMMARY_FIGURES`
    (`summaryfigures.py`: a figure added there is described here without another edit)."""
    out: Text = {}
    for f in summaryfigures.SUMMARY_FIGURES:
        out[f.name] = (f.unit, "mean over the variant's runs of each run's "
                               f"{summaryfigures.figure_source(f.metric)} "
                               f"({f.long_label})" + (
                                   "; an addition to the spec, optional: absent from a row "
                                   "none of whose runs has it" if f.optional else ""))
        if f.delta:
            base = f.delta.removesuffix("_percent")
            out[f.delta] = ("%", f"100 × (mean {f.name} / the same model's speculation "
                                 '"off" mean − 1); only in rows with speculation on')
            out[f"{base}_ci95_percent"] = ("%", "[low, high] 95 % percentile-bootstrap "
                                                f"interval of {f.delta}; null with the reason")
            out[f"{base}_mann_whitney_p"] = ("", "two-sided Mann–Whitney p-value of the two "
                                                 f"variants' per-run {f.name}")
            out[f"{base}_verdict"] = ("", f"{f.delta} against a minimum effect of 2 %: "
                                      "better/worse when the 95 % interval lies wholly beyond "
                                      "±2 %, equivalent when the 90 % interval of the same "
                                      "draws lies within it, else inconclusive; null without "
                                      "an interval (absent from summaries written before it)")
    return out


ROW: Text = {
    "model": ("", "the variant's model label"),
    "speculation": ("", 'the variant\'s speculation label ("off" without speculative '
                    "decoding)"),
    **_figure_rows(),
    "runs": ("", "how many runs the row's means are over"),
    "null_reasons": ("", "figure → why it is null (names the runs that lack it)"),
}

TELEMETRY: Text = {
    "model": ("", "the variant's model label"),
    "speculation": ("", "the variant's speculation label"),
    "accepted_length_range": ("tok", "[min, max] over the runs that have it of "
                              "server.spec_decode.accepted_length"),
    "acceptance_rate_range": ("ratio", "[min, max] over the runs that have it of "
                              "server.spec_decode.acceptance_rate"),
    "runs_sampled": ("", "runs that have either figure"),
    "runs": ("", "the variant's runs"),
    "unsampled_runs": ("", "the run_ids of the runs lacking either figure (left out of that "
                       "range, not counted as 0)"),
    "null_reasons": ("", "range → why it is null"),
}

CHECKS_UNDER_LOAD: Text = {
    "model": ("", "the variant's model label"),
    "speculation": ("", "the variant's speculation label"),
    "runs": ("", "the variant's runs"),
    "classes": ("", "one entry per check class, in the order its runs first name them"),
}
CHECK_CLASS: Text = {
    "name": ("", "the request class's name"),
    "check": ("", "the check suite it asks"),
    "runs": ("", "the variant's runs that have the class (their mix block lists it)"),
    "judged": ("", "Σ over those runs of mix.classes[i].verdicts.judged"),
    "passed": ("", "Σ over those runs of mix.classes[i].verdicts.passed"),
    "pass_rate": ("ratio", "passed / judged, pooled over the runs (not a mean of the runs' "
                  "rates); null when none was judged"),
    "pass_rate_ci95_low": ("ratio", "the pooled pass rate's 95 % Wilson score interval, its "
                           "lower end (what check_pass_rate_under_load must reach)"),
    "pass_rate_ci95_high": ("ratio", "the pooled pass rate's 95 % Wilson score interval, its "
                            "upper end"),
}

GATE: Text = {
    "gate": ("", "the gate's name, as the campaign's [gates] table names it"),
    "threshold": ("", "the value the campaign set: a percent, true/false, \"all_pass\" or a "
                  "pass rate"),
    "outcome": ("", '"pass", "fail", "not_significant" (the interval contains the '
                'threshold), "not_evaluated" (an input is missing) or "not_required"'),
    "figures": ("", "the figures the gate was decided on (which depend on the gate)"),
    "reason": ("", "the outcome in words"),
}
GATE_FIGURES: Text = {
    "candidate": ("", "the candidate variant (model/speculation)"),
    "incumbent": ("", "the incumbent variant it is compared with"),
    "field": ("", "the performance row field compared"),
    "candidate_mean": ("", "the candidate's mean of that field over its runs"),
    "incumbent_mean": ("", "the incumbent's mean of that field over its runs"),
    "improvement_percent": ("%", "the candidate's improvement: the delta for rates, minus the "
                            "delta for times"),
    "improvement_ci95_percent": ("%", "[low, high] 95 % bootstrap interval of the "
                                 "improvement; null without one"),
    "mann_whitney_p": ("", "two-sided Mann–Whitney p-value of the two variants' run values"),
    "candidate_runs": ("", "the candidate's runs"),
    "incumbent_runs": ("", "the incumbent's runs"),
    "runs": ("", "runs judged by no_saturated_runs"),
    "saturated_runs": ("", "the runs whose load generator was saturated"),
    "runs_without_verdict": ("", "the runs whose client block has no saturation verdict"),
    "checks": ("", "functional checks of the candidate judged"),
    "failed": ("", "the candidate's functional checks that did not pass"),
    "check_classes": ("", "check_pass_rate_under_load: the candidate's check classes, "
                      "pooled over its runs, as its checks_under_load row gives them"),
}

STATISTICS: Text = {
    "delta": ("", "how a delta is computed, in words"),
    "bootstrap": ("", "the bootstrap behind every interval"),
    "mann_whitney": ("", "how the Mann–Whitney p-value is computed, in words"),
}
BOOTSTRAP: Text = {
    "resamples": ("", "resamples per interval"),
    "seed": ("", "the seed each interval's generator starts from"),
    "confidence": ("ratio", "the intervals' confidence level"),
    "method": ("", "the interval method, in words"),
}

CAMPAIGN: Text = {
    "name": ("", "the campaign's name"),
    "campaign_file": ("", "the campaign file it ran with"),
    "scenario_file": ("", "the scenario file every run used"),
    "candidate": ("", "the candidate variant (model/speculation)"),
    "incumbent": ("", "the incumbent variant; null when none was named"),
    "baseline": ("", "the baseline variant; null when none was named"),
    "planned_runs": ("", "the runs campaign.json lists"),
    "summarized_runs": ("", "the runs whose figures are in the summary (finished, and their "
                        "benchmark.json verifies)"),
    "folder": ("", "the campaign folder's absolute path: where verify recomputes from (a "
               "location, not a figure)"),
}

RESTORATION: Text = {
    "result": ("", '"pass" when every alias was listed and answered, else "fail"'),
    "router_aliases": ("", "the aliases the campaign's [restoration] table names"),
    "all_tiers_admitting": ("", "every alias was listed by /v1/models and answered a "
                            "one-token completion"),
    "checked_at": ("", "UTC ISO-8601 …Z stamp of the check"),
    "aliases": ("", "one entry per alias, as campaign.json records it"),
}
ALIAS: Text = {
    "alias": ("", "the alias asked"),
    "result": ("", '"pass" when it was listed and answered, else "fail"'),
    "listed": ("", "GET /v1/models listed it"),
    "answered": ("", "it answered a one-token completion"),
    "attempts": ("", "requests sent for it"),
    "retried_after": ("", "what the retried request first got (an HTTP status, or "
                      '"connection reset"); null without a retry'),
    "retried_request": ("", "the request that was retried; null without a retry"),
    "reason": ("", "why it failed; null when it passed"),
}

FUNCTIONAL: Text = {
    "quality": ("", "model → quality part → passed/total of the quality suite"),
    "near_limit_retrieval": ("", "the near-limit retrieval check per model"),
}
MODEL_FUNCTIONAL: Text = {  # one model's block (or `both_models` / `all_models`)
    "coding": ("", "the coding suite's result (pass, fail or error; the worst variant's)"),
    "json": ("", "the JSON-mode suite's result"),
    "tools": ("", "tool calls: passed/total of the worst variant"),
    "streaming_tools": ("", "the streamed tool-call suite's result"),
    "tool_result_recovery": ("", "the tool-result recovery suite's result"),
    "responses_subset": ("", "the Responses API subset suite's result"),
    "thinking_disabled_reasoning_leakage": ("", "true when any variant leaked reasoning "
                                            "with thinking disabled; null when not decided"),
}
RETRIEVAL_FIELD = ("", "the retrieval suite's result, named by its prompt size in thousands "
                   "of tokens (retrieval_131k)")
NEAR_LIMIT: Text = {
    "requested_context_tokens": ("tok", "the prompt size asked for"),
}
NEAR_LIMIT_MODEL = ("", "the model's near-limit result (the worst variant's)")
NEAR_LIMIT_SECONDS = ("s", "the model's near-limit request time (its request_elapsed_s), "
                      "mean over its variants, to 0.1 s")
MULTIMODAL: Text = {
    "transport": ("", "how images reached the model, as the operator said; null when the "
                  "variants differ or it was not said"),
    "mtp_enabled": ("", "any variant checked had speculation on"),
    "not_tested": ("", "what the multimodal suite does not cover, so a reader does not "
                   "assume it"),
}
MULTIMODAL_MODEL: Text = {
    "general_image_seconds": ("s", "mean time of the answered general-image cases, mean "
                              "over the model's variants, to 0.1 s; null when none answered"),
    "ocr_seconds": ("s", "mean time of the answered OCR cases, mean over the model's "
                    "variants, to 0.1 s; null when none answered"),
    "result": ("", "the multimodal suite's result (the worst variant's)"),
}
NOT_INCLUDED: Text = {
    "checks_under_load": ("", "why there is no checks_under_load block"),
    "functional": ("", "why there is no functional block"),
    "multimodal": ("", "why there is no multimodal block"),
    "restoration": ("", "why there is no restoration block"),
}
