"""The allow-list: what of sqlglot's syntax tree ivm implements, and the refusal of everything else.

A clause that is parsed and then dropped is a wrong answer waiting to happen. So every statement is checked
before anything runs: each node's type must be listed in ``ALLOWED``, and each of its arguments that is set
must be one the translator honours. Anything else is refused by name and position, in SQL's words.

    >>> import sqlglot
    >>> check(sqlglot.parse_one("SELECT a FROM t ORDER BY a FETCH FIRST 2 ROWS WITH TIES", dialect="postgres"))
    Traceback (most recent call last):
    ...
    ivm.errors.NotSupportedError: FETCH FIRST ... WITH TIES is not supported (line 1, column 26)
"""

from __future__ import annotations

from sqlglot import exp

from sql.errors import error_at, position

__all__ = ["ALLOWED", "check", "sql_name"]

_BINARY = frozenset({"this", "expression"})
_UNARY = frozenset({"this"})

# node type -> the arguments the translator honours when set; flags the parser always sets and that change
# nothing in PostgreSQL's dialect are listed too
ALLOWED: dict[type[exp.Expression], frozenset[str]] = {
    # statements
    exp.Select: frozenset(
        {"with_", "expressions", "distinct", "from_", "joins", "where", "group", "having", "order", "limit"}
        | {"offset"}
    ),
    exp.Union: frozenset({"with_", "this", "expression", "distinct", "order", "limit", "offset"}),
    exp.Except: frozenset({"with_", "this", "expression", "distinct", "order", "limit", "offset"}),
    exp.Intersect: frozenset({"with_", "this", "expression", "distinct", "order", "limit", "offset"}),
    exp.Insert: frozenset({"this", "expression", "default", "conflict", "returning", "with_"}),
    exp.Delete: frozenset({"this", "where", "using", "returning", "with_"}),
    exp.Update: frozenset({"this", "expressions", "where", "from_", "returning", "with_"}),
    exp.OnConflict: frozenset({"action", "conflict_keys", "constraint", "expressions", "where"}),
    exp.Returning: frozenset({"expressions"}),
    exp.Create: frozenset({"this", "kind", "expression", "exists", "properties", "replace"}),
    exp.Drop: frozenset({"this", "kind", "tables", "exists", "cascade", "restrict", "materialized"}),
    exp.Alter: frozenset({"this", "kind", "actions", "exists", "only"}),  # ONLY: ivm has no inheritance
    exp.RenameColumn: frozenset({"this", "to"}),
    exp.AlterRename: _UNARY,
    exp.TruncateTable: frozenset({"expressions", "identity", "option"}),
    exp.Copy: frozenset({"this", "kind", "files", "params", "credentials"}),
    exp.Command: frozenset({"this", "expression"}),
    exp.Transaction: frozenset(),
    exp.Commit: frozenset(),
    exp.Rollback: frozenset(),
    # query clauses
    exp.With: frozenset({"expressions", "recursive"}),
    exp.CTE: frozenset({"this", "alias", "materialized"}),
    exp.From: _UNARY,
    exp.Join: frozenset({"this", "on", "side", "kind", "using", "method"}),
    exp.Table: frozenset({"this", "alias", "ordinality"}),  # WITH ORDINALITY: of generate_series only
    exp.TableAlias: frozenset({"this", "columns"}),
    exp.Subquery: frozenset({"this", "alias"}),
    exp.Lateral: frozenset({"this", "alias", "ordinality"}),  # over a subquery or generate_series
    exp.ExplodingGenerateSeries: frozenset({"start", "end", "step"}),  # in FROM (``sql.series``)
    exp.Where: _UNARY,
    exp.Group: frozenset({"expressions"}),
    exp.Having: _UNARY,
    exp.Order: frozenset({"this", "expressions"}),  # "this": the values of an aggregate with ORDER BY
    exp.Ordered: frozenset({"this", "desc", "nulls_first"}),
    exp.Limit: frozenset({"expression"}),
    exp.Offset: frozenset({"expression"}),
    exp.Any: _UNARY,  # of a subquery, as ``sql.decorrelate`` checks
    exp.All: _UNARY,
    exp.Fetch: frozenset({"direction", "count", "limit_options"}),
    exp.LimitOptions: frozenset({"rows"}),
    exp.Distinct: frozenset({"expressions", "on"}),
    exp.Alias: frozenset({"this", "alias"}),
    exp.Star: frozenset(),
    exp.Tuple: frozenset({"expressions"}),
    exp.Values: frozenset({"expressions"}),
    exp.Exists: _UNARY,
    # names and constants
    exp.Column: frozenset({"this", "table"}),
    exp.Identifier: frozenset({"this", "quoted"}),
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Null: frozenset(),
    exp.Boolean: _UNARY,
    exp.Var: _UNARY,
    exp.Interval: frozenset({"this", "unit"}),
    exp.DataType: frozenset({"this", "expressions"}),
    exp.DataTypeParam: _UNARY,
    # operators
    exp.Paren: _UNARY,
    exp.Neg: _UNARY,
    exp.Not: _UNARY,
    exp.And: _BINARY,
    exp.Or: _BINARY,
    exp.Add: _BINARY,
    exp.Sub: _BINARY,
    exp.Mul: _BINARY,
    exp.Div: frozenset({"this", "expression", "typed", "safe"}),
    exp.Mod: _BINARY,
    exp.EQ: _BINARY,
    exp.NEQ: _BINARY,
    exp.LT: _BINARY,
    exp.LTE: _BINARY,
    exp.GT: _BINARY,
    exp.GTE: _BINARY,
    exp.NullSafeEQ: _BINARY,
    exp.NullSafeNEQ: _BINARY,
    exp.Is: frozenset({"this", "expression", "negate"}),
    exp.Between: frozenset({"this", "low", "high", "negate"}),
    exp.In: frozenset({"this", "expressions", "query", "negate"}),
    exp.Like: frozenset({"this", "expression", "negate"}),
    exp.ILike: frozenset({"this", "expression", "negate"}),
    exp.Escape: _BINARY,  # of LIKE and ILIKE, as ``sql.patterns`` checks
    exp.RegexpLike: _BINARY,
    exp.RegexpILike: _BINARY,
    exp.Overlay: frozenset({"this", "expression", "from_", "for_"}),
    exp.Translate: frozenset({"this", "from_", "to"}),
    exp.RegexpReplace: frozenset(
        {"this", "expression", "replacement", "modifiers", "position", "occurrence", "single_replace"}
    ),
    exp.DPipe: frozenset({"this", "expression", "safe"}),
    exp.Case: frozenset({"this", "ifs", "default"}),
    exp.If: frozenset({"this", "true", "false"}),
    exp.Cast: frozenset({"this", "to"}),
    exp.AtTimeZone: frozenset({"this", "zone"}),
    exp.Coalesce: frozenset({"this", "expressions"}),
    exp.Nullif: _BINARY,
    # aggregates
    exp.Count: frozenset({"this", "big_int"}),
    exp.Sum: _UNARY,
    exp.Avg: _UNARY,
    exp.Min: _UNARY,
    exp.Max: _UNARY,
    # window functions
    exp.Window: frozenset({"this", "partition_by", "order", "spec", "over"}),
    exp.WindowSpec: frozenset({"kind", "start", "start_side", "end", "end_side", "exclude"}),
    exp.RowNumber: frozenset(),
    exp.Rank: frozenset(),
    exp.DenseRank: frozenset(),
    exp.PercentRank: frozenset(),
    exp.CumeDist: frozenset(),
    exp.Ntile: _UNARY,
    exp.Lag: frozenset({"this", "offset", "default"}),
    exp.Lead: frozenset({"this", "offset", "default"}),
    exp.FirstValue: _UNARY,
    exp.LastValue: _UNARY,
    exp.NthValue: frozenset({"this", "offset"}),
    exp.LogicalAnd: _UNARY,
    exp.LogicalOr: _UNARY,
    exp.GroupConcat: frozenset({"this", "separator"}),
    exp.ArrayAgg: _UNARY,  # as text, see ``sql.aggregates``
    exp.Stddev: _UNARY,
    exp.StddevSamp: _UNARY,
    exp.StddevPop: _UNARY,
    exp.Variance: _UNARY,
    exp.VariancePop: _UNARY,
    exp.Filter: _BINARY,
    exp.Rollup: frozenset({"expressions"}),
    exp.Cube: frozenset({"expressions"}),
    exp.GroupingSets: frozenset({"expressions"}),
    exp.Grouping: frozenset({"expressions"}),
    # functions
    exp.Abs: _UNARY,
    exp.Sign: _UNARY,
    exp.Round: frozenset({"this", "decimals"}),
    exp.Floor: _UNARY,
    exp.Ceil: _UNARY,
    exp.Sqrt: _UNARY,
    exp.Cbrt: _UNARY,
    exp.Pow: _BINARY,
    exp.Ln: _UNARY,
    exp.Exp: _UNARY,
    exp.Log: _BINARY,
    exp.Trunc: frozenset({"this", "decimals"}),
    exp.Greatest: frozenset({"this", "expressions", "ignore_nulls"}),
    exp.Least: frozenset({"this", "expressions", "ignore_nulls"}),
    exp.Length: _UNARY,
    exp.Upper: _UNARY,
    exp.Lower: _UNARY,
    exp.Trim: frozenset({"this", "expression", "position"}),
    exp.Substring: frozenset({"this", "start", "length"}),
    exp.Left: _BINARY,
    exp.Right: _BINARY,
    exp.Replace: frozenset({"this", "expression", "replacement"}),
    exp.StrPosition: frozenset({"this", "substr"}),
    exp.StartsWith: _BINARY,
    exp.Reverse: _UNARY,
    exp.Pad: frozenset({"this", "expression", "fill_pattern", "is_left"}),
    exp.SplitPart: frozenset({"this", "delimiter", "part_index"}),
    exp.Concat: frozenset({"expressions", "safe", "coalesce"}),
    exp.ConcatWs: frozenset({"expressions", "safe", "coalesce"}),
    exp.Repeat: frozenset({"this", "times"}),
    exp.Extract: _BINARY,
    exp.TimestampTrunc: frozenset({"this", "unit"}),
    exp.CurrentTimestamp: frozenset(),
    exp.CurrentDate: frozenset(),
    exp.Localtimestamp: frozenset(),
    # data definition
    exp.Schema: frozenset({"this", "expressions"}),
    exp.ColumnDef: frozenset({"this", "kind", "constraints", "exists"}),  # exists: ADD COLUMN IF NOT EXISTS
    exp.ColumnConstraint: frozenset({"this", "kind"}),
    exp.NotNullColumnConstraint: frozenset({"allow_null"}),
    exp.PrimaryKeyColumnConstraint: frozenset({"include"}),
    exp.PrimaryKey: frozenset({"expressions", "include"}),
    exp.UniqueColumnConstraint: frozenset({"this", "include"}),
    exp.CheckColumnConstraint: frozenset({"this"}),
    exp.DefaultColumnConstraint: _UNARY,
    exp.GeneratedAsIdentityColumnConstraint: frozenset({"this", "start", "increment", "minvalue", "maxvalue"}),
    exp.Constraint: frozenset({"this", "expressions"}),
    exp.AlterColumn: frozenset({"this", "dtype", "using", "default", "drop", "allow_null"}),
    exp.AddConstraint: frozenset({"expressions"}),
    exp.ForeignKey: frozenset({"expressions", "reference", "options"}),
    exp.Reference: frozenset({"this", "expressions", "options"}),
    exp.IndexParameters: frozenset({"columns"}),
    exp.Index: frozenset({"this", "table", "params"}),
    exp.Properties: frozenset({"expressions"}),
    exp.MaterializedProperty: frozenset(),
    exp.WithDataProperty: frozenset({"no"}),
    exp.CopyParameter: frozenset({"this", "expression", "expressions"}),
    exp.Credentials: frozenset(),
}

# functions sqlglot parses as anonymous calls (or ``sql.dialect`` keeps as calls by name) that the translator
# implements by name
_ANONYMOUS = frozenset({"every", "to_char", "to_date", "to_timestamp", "date_part", "transaction_timestamp"})

# SQL's words for node types and arguments that have no plain SQL rendering of their own
_NODE_NAMES: dict[type[exp.Expression], str] = {
    exp.IgnoreNulls: "IGNORE NULLS",
    exp.RespectNulls: "RESPECT NULLS",
    exp.Reference: "REFERENCES",
    exp.ForeignKey: "FOREIGN KEY",
    exp.Lateral: "LATERAL",
    exp.Unnest: "UNNEST",
    exp.Filter: "FILTER (WHERE ...)",
    exp.GroupConcat: "STRING_AGG",
    exp.ArrayAgg: "ARRAY_AGG",
    exp.Returning: "RETURNING",
    exp.OnConflict: "ON CONFLICT",
    exp.TemporaryProperty: "TEMPORARY",
    exp.UnloggedProperty: "UNLOGGED",
    exp.Placeholder: "a parameter placeholder",
    exp.SimilarTo: "SIMILAR TO",
    exp.CurrentTime: "current_time (of type time with time zone, which ivm has not)",
    exp.Localtime: "localtime (of type time, which ivm has not)",
    exp.Parameter: "a parameter",
    exp.Dot: "a qualified name",
    exp.Bracket: "subscripts ([...])",
    exp.Array: "ARRAY",
    exp.Collate: "COLLATE",
    exp.Cube: "CUBE",
    exp.Rollup: "ROLLUP",
    exp.GroupingSets: "GROUPING SETS",
    exp.Describe: "DESCRIBE",
    exp.Set: "SET",
    exp.Merge: "MERGE",
    exp.Alter: "ALTER",
    exp.TruncateTable: "TRUNCATE",
    exp.AlterSet: "ALTER TABLE ... SET",
    exp.ComputedColumnConstraint: "a generated column (GENERATED ALWAYS AS (...) STORED)",
}
_ARG_NAMES: dict[tuple[type[exp.Expression], str], str] = {
    (exp.Distinct, "on"): "DISTINCT ON",
    (exp.LimitOptions, "with_ties"): "FETCH FIRST ... WITH TIES",
    (exp.LimitOptions, "percent"): "FETCH FIRST ... PERCENT",
    (exp.OnConflict, "index_predicate"): "ON CONFLICT (...) WHERE (the predicate of a partial index)",
    (exp.OnConflict, "duplicate"): "ON DUPLICATE KEY",
    (exp.Returning, "into"): "RETURNING ... INTO",
    (exp.Delete, "cluster"): "DELETE ... CLUSTER",
    (exp.Select, "into"): "SELECT ... INTO",
    (exp.Select, "locks"): "SELECT ... FOR UPDATE/SHARE",
    (exp.Select, "windows"): "WINDOW",
    (exp.Window, "alias"): "named windows (OVER name)",
    (exp.Window, "first"): "KEEP (DENSE_RANK FIRST/LAST)",
    (exp.NthValue, "from_first"): "NTH_VALUE ... FROM FIRST/LAST",
    (exp.Select, "qualify"): "QUALIFY",
    (exp.Select, "laterals"): "LATERAL",
    (exp.Drop, "concurrently"): "DROP ... CONCURRENTLY",
    (exp.Drop, "temporary"): "DROP TEMPORARY",
    (exp.Drop, "purge"): "DROP ... PURGE",
    (exp.Alter, "cascade"): "ALTER TABLE ... CASCADE",
    (exp.Alter, "options"): "this ALTER TABLE form",
    (exp.Alter, "not_valid"): "NOT VALID",
    (exp.TruncateTable, "exists"): "TRUNCATE IF EXISTS",
    (exp.TruncateTable, "is_database"): "TRUNCATE DATABASE",
    (exp.TruncateTable, "partition"): "TRUNCATE ... PARTITION",
    (exp.GeneratedAsIdentityColumnConstraint, "cycle"): "an identity column's CYCLE",
    (exp.GeneratedAsIdentityColumnConstraint, "order"): "an identity column's ORDER",
    (exp.GeneratedAsIdentityColumnConstraint, "on_null"): "GENERATED BY DEFAULT ON NULL",
    (exp.GeneratedAsIdentityColumnConstraint, "expression"): "a generated column (GENERATED ALWAYS AS (...))",
    (exp.WithDataProperty, "statistics"): "WITH DATA AND STATISTICS",
    (exp.Create, "unique"): "CREATE UNIQUE INDEX",
    (exp.Create, "concurrently"): "CREATE ... CONCURRENTLY",
    (exp.Create, "refresh"): "CREATE ... REFRESH",
    (exp.Column, "db"): "a schema-qualified column name",
    (exp.Column, "catalog"): "a database-qualified column name",
    (exp.Table, "db"): "a schema-qualified table name",
    (exp.Table, "catalog"): "a database-qualified table name",
    (exp.Table, "only"): "ONLY",
    (exp.Table, "sample"): "TABLESAMPLE",
    (exp.Group, "cube"): "GROUP BY CUBE",
    (exp.Group, "rollup"): "GROUP BY ROLLUP",
    (exp.Group, "grouping_sets"): "GROUPING SETS",
    (exp.Group, "all"): "GROUP BY ALL",
    (exp.With, "search"): "WITH RECURSIVE ... SEARCH",
    (exp.With, "cycle"): "WITH RECURSIVE ... CYCLE",
    (exp.Cast, "format"): "CAST ... FORMAT",
    (exp.Cast, "safe"): "TRY_CAST",
    (exp.Trim, "collation"): "TRIM ... COLLATE",
    (exp.Ordered, "with_fill"): "ORDER BY ... WITH FILL",
    (exp.UniqueColumnConstraint, "nulls"): "UNIQUE NULLS NOT DISTINCT",
    (exp.CheckColumnConstraint, "enforced"): "CHECK ... NOT ENFORCED",
    (exp.AlterColumn, "collate"): "COLLATE",
    (exp.Transaction, "modes"): "transaction modes (ISOLATION LEVEL, READ ONLY, ...)",
    (exp.Commit, "chain"): "COMMIT AND CHAIN",
    (exp.Rollback, "savepoint"): "ROLLBACK TO SAVEPOINT",
    (exp.Round, "truncate"): "ROUND with a truncation mode",
    (exp.ColumnDef, "default"): "a column default",
    (exp.DataType, "values"): "this type",
    (exp.DataType, "kind"): "this type",
    (exp.DataType, "collate"): "COLLATE",
    (exp.Copy, "format"): "COPY ... FORMAT",
    (exp.Insert, "overwrite"): "INSERT OVERWRITE",
    (exp.Insert, "alternative"): "INSERT OR ...",
    (exp.Insert, "by_name"): "INSERT ... BY NAME",
}


def check(node: exp.Expression, parameters: bool = False) -> None:
    """Refuse, by name and position, the first node or set argument of ``node``'s tree that is not in
    ``ALLOWED`` (with ``parameters``, ``$n`` placeholders pass: the constants bound to them are checked
    then)."""
    for n in node.walk():
        if parameters and isinstance(n, (exp.Parameter, exp.Placeholder)):
            continue
        allowed = ALLOWED.get(type(n))
        if isinstance(n, exp.Anonymous) and str(n.this).lower() in _ANONYMOUS:
            allowed = frozenset({"this", "expressions"})
        if allowed is None:
            raise error_at(_located(n), f"{sql_name(n)} is not supported", unsupported=True)
        if isinstance(n, exp.CTE) and isinstance(n.this, (exp.Insert, exp.Update, exp.Delete)):
            what = {exp.Insert: "INSERT", exp.Update: "UPDATE", exp.Delete: "DELETE"}[type(n.this)]
            raise error_at(
                n.this,
                f"data-modifying statements in WITH ({what} in WITH) are not supported",
                unsupported=True,
            )
        if _dml_source(n):
            allowed = allowed | {"joins"}  # UPDATE ... FROM and DELETE ... USING hang joins on their first item
        for arg, value in n.args.items():
            if arg not in allowed and _is_set(value):
                shown = value[0] if isinstance(value, list) else value
                what = _ARG_NAMES.get((type(n), arg)) or _arg_sql(n, arg, value)
                where = shown if isinstance(shown, exp.Expression) else n
                raise error_at(_located(where), f"{what} is not supported", unsupported=True)


def _dml_source(node: exp.Expression) -> bool:
    """Whether ``node`` is an item of UPDATE's FROM or DELETE's USING list, where the parser keeps the joins
    that follow it."""
    parent = node.parent
    if isinstance(parent, exp.From) and isinstance(parent.parent, exp.Update):
        return True
    return isinstance(parent, exp.Delete) and node.arg_key == "using"


def _located(node: exp.Expression) -> exp.Expression:
    """``node``, or when the parser kept no position for any of its parts (a keyword such as EXCLUDE TIES),
    the nearest enclosing node that has one."""
    at: exp.Expression | None = node
    while at is not None and position(at)[0] is None:
        at = at.parent
    return node if at is None else at


def sql_name(node: exp.Expression) -> str:
    """What a node is called in SQL: a keyword, a function's name, or the node written out as SQL."""
    for cls in type(node).__mro__:
        if cls in _NODE_NAMES:
            return _NODE_NAMES[cls]
    if isinstance(node, exp.Anonymous) and isinstance(node.this, str):
        return f"function {node.this.lower()}()"
    text = _sql(node)
    if isinstance(node, exp.Func) and "(" in text:
        head = text.split("(", 1)[0].strip()
        if head and " " not in head:
            return f"function {head.lower()}()"
    if isinstance(node, exp.Expression) and len(text) <= 60:
        return text
    return text[:57] + "..."


def _arg_sql(node: exp.Expression, arg: str, value) -> str:
    if isinstance(value, exp.Expression):
        text = _sql(value)
    elif isinstance(value, list) and value and isinstance(value[0], exp.Expression):
        text = ", ".join(_sql(v) for v in value)
    else:
        text = ""
    text = text.strip()
    if not text:
        return f"{_sql(node)[:40]} ({arg.rstrip('_').replace('_', ' ')})"
    return text if len(text) <= 60 else text[:57] + "..."


def _sql(node: exp.Expression) -> str:
    try:
        text = node.sql(dialect="postgres")
    except Exception:  # a node PostgreSQL's generator cannot write (one without its parts)
        text = ""
    return text or "this construct"


def _is_set(value) -> bool:
    if value is None or value is False or value == "":
        return False
    if isinstance(value, list):
        return bool(value)
    return True
