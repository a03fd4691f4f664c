"""``tfcheck table ROW`` (one row, with a source a reader can find) and ``tfcheck help TOPIC`` (the user guide,
shipped with the package, where the error messages now send a user)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tfcheck import cli
from tfcheck.errors import DeclarationError
from tfcheck.model.facts.declarations import parse_value
from tfcheck.report import table

DOCS = Path(__file__).resolve().parents[3] / "docs"
#: the title of the source article of the six §5.3 rows (shared/seeds/001_*.txt)
ARTICLE = "Transformer架构深度解析：从Self-Attention原理到PyTorch代码实战"


def test_table_row_prints_that_row_only_with_its_checks_and_source(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    assert cli.main(["table", "out-of-memory"]) == 0
    out = capsys.readouterr().out
    assert out.count("troubleshooting [") == 1 and "[out-of-memory] CUDA out of memory" in out
    assert "checks: forward.smoke, shape.contract" in out and f"source: the article “{ARTICLE}”" in out
    assert cli.main(["table", "out-of-memory", "--lang", "zh"]) == 0
    assert "可能原因: batch太大或模型太大" in capsys.readouterr().out


def test_an_unknown_row_is_a_usage_error_that_says_how_to_list_them(capsys):
    assert cli.main(["table", "out-of-memry"]) == 2
    err = capsys.readouterr().err
    assert "no troubleshooting row 'out-of-memry' (did you mean out-of-memory?)" in err
    assert "run `tfcheck table` to list them" in err


def test_the_source_article_rows_name_the_article_and_its_section():
    from_article = [r for r in table.rows().values() if r.source != "tfcheck"]
    assert len(from_article) == 6
    for r in from_article:
        assert r.source.startswith(f"the article “{ARTICLE}”") and "§5.3 “常见报错与排查速查表”" in r.source, r.id
        assert "seed" not in r.source


def test_help_lists_the_topics_with_their_titles(capsys):
    assert cli.main(["help"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[2:] if line.strip()}
    assert set(lines) == {p.stem for p in DOCS.glob("*.md")} | {f"models/{p.stem}" for p in DOCS.glob("models/*.md")}
    assert lines["declarations"].split(None, 1)[1] == "Declarations"


def test_help_topic_prints_the_page_as_it_is_in_docs(capsys):
    assert cli.main(["help", "declarations"]) == 0
    assert capsys.readouterr().out == (DOCS / "declarations.md").read_text("utf-8")
    assert cli.main(["help", "models/huggingface"]) == 0
    assert capsys.readouterr().out == (DOCS / "models" / "huggingface.md").read_text("utf-8")


def test_an_unknown_topic_is_a_usage_error(capsys):
    assert cli.main(["help", "declaration"]) == 2
    err = capsys.readouterr().err
    assert "(did you mean declarations?)" in err and "run `tfcheck help` to list the topics" in err


def test_a_declaration_error_sends_the_user_to_a_page_the_package_has():
    with pytest.raises(DeclarationError, match=r"Run `tfcheck help declarations`\.") as raised:
        parse_value("knd", "decoder", "--set")
    assert "docs/" not in str(raised.value)
