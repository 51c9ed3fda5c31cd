"""A sweep planned before anything runs: the sweep file into points, stages and searches, the dry run. Pure."""
