"""The box's floor: what peer-to-peer physics allows an all-reduce of each size, measured or from published figures."""
