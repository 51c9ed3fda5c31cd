"""The replay engine: a sweep point's step plan replayed on live ranks (gloo or NCCL), timed and verified.

Its layers, each importing only those before it: the clocks (`timing`), the tensors whose exact reduction is known
(`replay_tensors`) and the graph-mode per-op pass (`captured_ops`); what runs between collectives and when each
rank arrives at one (`spacers`); the timed, verified step replay (`harness`); on the harness, an untimed Kineto
trace of a few steps (`profile_pass`) and one all-reduce size timed for the crossover search (`size_timing`); one
sweep point measured in a fresh process group, in a fresh worker on every rank (`trial`); and the server that
forks those workers from one process with torch imported once (`forkserver`). Importing the package imports none
of them, so planning code can read a constant here without loading torch.
"""
