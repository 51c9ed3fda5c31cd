"""NCCL graph files for this box: candidates written in NCCL's own NCCL_GRAPH_FILE format from the doctor's facts
(sockets, PCIe switches, path levels, link or floor bandwidth), checked by a reader that follows NCCL's parser,
and the INFO-log check that NCCL really loaded one. Pure apart from `command.py`.
"""
