"""The report: a run's records analysed into one answer, the files a user pastes, and the page.

analysis/: the front door run_analysis.analyze_run -> RunAnalysis (one per source of a run) over the pure analyses
(frame.py, ranking.py, choices.py, projection.py, ops.py, heatmap.py, routing.py, ...), the run's one answer
(decision.py) and the words and numbers every output states it in; exports/: the pasted files' texts; views/: the
page. Analysis imports no export or view, and no export imports a view. write.py writes every file; command.py is
`commprof report` (flags, run folders).
"""
