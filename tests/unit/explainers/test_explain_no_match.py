"""An error no troubleshooting row recognises: the explanation says so and what to do, and shows no row."""
from __future__ import annotations

import tfcheck
from tfcheck import cli


def test_an_unmatched_message_shows_the_no_match_line_and_what_to_do_not_the_generic_row():
    explanation = tfcheck.explain("my dataloader broke")
    text = str(explanation)
    assert not explanation.matched and "no troubleshooting row matches this error" in text
    assert "look at: the innermost frame of the traceback that is in your own code" in text
    assert "forward-fails" not in text and "likely cause" not in text


def test_the_command_line_prints_only_that_and_exits_1(capsys):
    assert cli.main(["explain", "my dataloader broke"]) == 1
    out = capsys.readouterr().out
    assert "no troubleshooting row matches" in out and "[forward-fails]" not in out


def test_a_matched_message_still_shows_its_row(capsys):
    assert cli.main(["explain", "mat1 and mat2 shapes cannot be multiplied (21x64 and 32x32)"]) == 0
    assert "[mat1-mat2-shapes]" in capsys.readouterr().out
