"""The planner: a model's config.json (models.py, presets in presets/) → the ordered collectives of one step
(plan.py); command.py is `commprof plan`."""
