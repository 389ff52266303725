-- ivm run --keep-going
-- Each error names its line, shows the statement with a caret under the position, and the run goes on.
CREATE TABLE t (id INTEGER PRIMARY KEY, label TEXT NOT NULL);
INSERT INTO t VALUES (1, 'one');
SELEC id FROM t;
SELECT id,
       lable
FROM t;
INSERT INTO t VALUES (1, 'again');
INSERT INTO t VALUES (2, NULL);
SELECT * FROM missing;
SUBSCRIBE TO missing;
SUBSCRIBE (SELECT nope FROM t);
\frobnicate
INSERT INTO t VALUES (2, 'two');
SELECT * FROM t ORDER BY id;
