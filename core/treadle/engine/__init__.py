"""The loop: one step = one iteration, a pure function of the run's transcript."""
