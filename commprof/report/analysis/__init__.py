"""A run's records analysed into its one answer, and the words and numbers every output says it in. Pure."""
