"""The GPU check's time budget, apart from the paths it runs, so its entry point can state it before importing
anything a bare interpreter may lack."""

# Six minutes on one GPU with start-up and the archive (SMOKE_WALL_S), so a failed first run leaves a rerun inside a
# 15-minute lease of the machine.
SMOKE_WALL_S = 360
BUDGET_S = 330
EXTENDED_BUDGET_S = 540  # with --extended: both steps inside one 10-minute call, with room for the archive
