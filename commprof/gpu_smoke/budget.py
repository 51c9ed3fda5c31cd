"""The GPU check's time budget, apart from the paths it runs, so its entry point can state it before importing
anything a bare interpreter may lack."""

BUDGET_S = 470  # under 8 minutes on one GPU, with room for start-up and the summary
EXTENDED_BUDGET_S = 540  # with --extended: both steps inside one 10-minute call, with room for the archive
