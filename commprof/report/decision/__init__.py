"""The Decision: a run's one answer as a typed, frozen structure (msgspec), and summary.json, which is it whole.

`types.py` defines it (the engine's observation and its explanations: `observation.py`); `claim.py` the statements that carry verdicts; `codec.py` reads and writes summary.json;
`formatting.py` how every output writes its numbers. The analysis builds a Decision (report/analysis/decide.py);
the page, the terminal and every exported file render one and import nothing else of the report's analysis.
"""
