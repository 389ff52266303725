-- ivm run --until-quiet
-- A subscription prints the view's current rows as diffs, then the diffs every later statement commits.
CREATE TABLE readings (sensor INTEGER, value INTEGER);
CREATE VIEW peaks AS SELECT sensor, MAX(value) AS peak FROM readings GROUP BY sensor;
INSERT INTO readings VALUES (1, 10), (2, 20);
SUBSCRIBE TO peaks;
INSERT INTO readings VALUES (1, 15);
INSERT INTO readings VALUES (2, 5);
SUBSCRIBE (SELECT sensor, value FROM readings WHERE value >= 15);
BEGIN;
INSERT INTO readings VALUES (3, 30);
DELETE FROM readings WHERE sensor = 1 AND value = 15;
COMMIT;
\unsubscribe
INSERT INTO readings VALUES (3, 31);
SELECT * FROM peaks ORDER BY sensor;
