"""Reports (report.md / report.html / history.html), the report command, and the stand-alone
reproducers: the PyTorch script and the generated candle and burn cargo projects must print what
the targets observed for the same case.

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_reports.py.
"""

from __future__ import annotations


def test_a_message_of_several_lines_is_commented_line_by_line():
    from harness.targets.reproducer_base import comment_lines

    message = 'RuntimeError: Error(s) in loading state_dict for Model:\n\tWhile copying the parameter named "w"'
    for prefix in ("#", "//"):
        lines = comment_lines(prefix, 3, {"op": "load", "from": "c0"}, "error", message)
        assert all(line.startswith(prefix) for line in lines)
        assert lines[1].endswith("`error`: RuntimeError: Error(s) in loading state_dict for Model:")
        assert lines[2] == f'{prefix}     While copying the parameter named "w"'
