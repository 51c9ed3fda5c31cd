"""The report: analysis of a run's records (pure pandas), exports a user can paste, and the HTML page.

analysis.py turns records into DataFrames and answers the questions; exports.py writes the files that apply
an answer (recommend.env, nccl_tuner.conf, engine flags, summary.json, results.csv, nccl-tests tables);
answers.py words the first screen (what to set, how much faster, does speculation pay, table 1);
costmodel_check.py sets measured against simulated numbers; formatting.py writes numbers with their units;
render.py draws the plots and fills templates/index.html; command.py is `commprof report`.
"""
