"""The report: a run's records analysed (pure pandas), the page, and the files a user pastes.

Front door: run_analysis.analyze_run → RunAnalysis (one per source of a run), over the pure analyses:
frame.py (records → DataFrame, row selections), ranking.py (noise rule, best points, the recommendation),
choices.py (table 1, other implementations, fused kinds), projection.py (breakdown, speculative decoding),
ops.py (per-op sites and sizes), heatmap.py (sweep axes), costmodel_check.py (measured vs simulated).
Words and views: words.py, provenance.py, doctor_verdicts.py, formatting.py, views/ (the page);
exports.py and engine_hints.py (the pasted files' texts), summary.py (summary.json);
write.py writes every file; command.py is `commprof report` (flags, run folders).
"""
