-- ivm run
-- Without --keep-going the run stops at the first error: the last INSERT never runs.
CREATE TABLE t (id INTEGER PRIMARY KEY);
INSERT INTO t VALUES (1);
INSERT INTO t VALUES ('x');
INSERT INTO t VALUES (2);
