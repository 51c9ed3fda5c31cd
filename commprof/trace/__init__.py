"""Read the engine's own records: PyTorch profiler (Kineto) traces and NCCL Inspector dumps.

`events` loads trace files (the edge), `collectives` finds the communication in them, `steps` finds the
repeating step and what it costs, `plan_check` compares a step with commprof's plan; `command` is the front
door (`commprof trace`). Everything between loading and printing is pure, over pandas DataFrames.
"""
