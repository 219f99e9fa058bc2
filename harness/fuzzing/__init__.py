"""Fuzzing: the engine, campaigns, their run folders, the corpus and the baseline."""
