"""NCCL's own word on a run: parse.py reads an NCCL_DEBUG=INFO log into facts, findings.py turns them into
findings with evidence and a fix, command.py is `commprof nccl-log`. The doctor and the sweep read logs here too."""
