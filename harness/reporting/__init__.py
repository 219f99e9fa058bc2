"""Reporting: replayed cases, run reports, history, JUnit and reproducers."""
