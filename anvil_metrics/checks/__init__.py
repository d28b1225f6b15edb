"""`anvil check`: does the server still answer correctly? Functional and multimodal checks.

A faster quantization that breaks tool calls, leaks reasoning with thinking disabled or loses
a needle at 131k tokens is not promotable, so a campaign runs these beside its load and
`anvil summarize` fills the public summary's `functional` and `multimodal` blocks from them.

    registry.py   the suites, their order, where each lives
    client.py     one request at a time: JSON or SSE, retries kept, errors classified
    suite.py      what a suite is given; asking and timing one case
    results.py    CaseResult / SuiteResult and the rule for a suite's verdict
    runner.py     runs suites, writes anvil-serving.checks/v1
    jsonmatch.py  an answer's JSON against the value asked for (json and tools suites)
    <suite>.py    one module per suite (or family): its questions and its judge

A transport error is an `error`, never a `fail` and never a `pass` (`results.py`).
"""
