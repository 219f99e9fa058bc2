"""Shrinking: a finding's program reduced to a 1-minimal case."""
