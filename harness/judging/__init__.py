"""Judging: traces and verdicts, value comparison, the oracle and its findings."""
