"""Statement splitting: ``;`` ends a statement only as a token, backslash commands are lines of their own,
and every item knows the input line where it starts."""

from ivm.cli.statements import Item, Splitter, split


def test_semicolons_in_strings_quoted_names_and_comments_do_not_end_statements():
    text = "SELECT 'a;b' AS \"x;y\" FROM t; -- c;d\n/* e; f */ SELECT 2\n  FROM u;\nSELECT 'it''s;' FROM v;"
    assert split(text) == [
        Item("sql", "SELECT 'a;b' AS \"x;y\" FROM t", 1),
        Item("sql", "/* e; f */ SELECT 2\n  FROM u", 2),
        Item("sql", "SELECT 'it''s;' FROM v", 4),
    ]


def test_backslash_commands_only_between_statements():
    text = "\\d\nSELECT a\n\\d\nFROM t;\n  \\d t  \n"
    items = split(text)
    assert items[0] == Item("meta", "\\d", 1)
    # inside a statement a backslash line is part of the statement (the SQL layer then rejects it)
    assert items[1] == Item("sql", "SELECT a\n\\d\nFROM t", 2)
    assert items[2] == Item("meta", "\\d t", 5)


def test_line_numbers_skip_blank_lines_and_comment_lines():
    items = split("\n\n-- a comment\nSELECT 1 FROM t;\n\nSELECT 2 FROM t; SELECT 3\nFROM t;")
    assert [(i.text, i.line) for i in items] == [
        ("SELECT 1 FROM t", 4),
        ("SELECT 2 FROM t", 6),
        ("SELECT 3\nFROM t", 6),
    ]


def test_open_string_continues_over_lines_and_last_statement_needs_no_semicolon():
    sp = Splitter()
    assert sp.feed("SELECT 'a;") == []
    assert sp.pending
    assert sp.feed("b;' FROM t;") == [Item("sql", "SELECT 'a;\nb;' FROM t", 1)]
    assert not sp.pending
    assert sp.feed("SELECT 1") == []
    assert sp.finish() == [Item("sql", "SELECT 1", 3)]
    assert split("SELECT 1 FROM t; -- done") == [Item("sql", "SELECT 1 FROM t", 1)]
    assert split(";;\n;") == []
