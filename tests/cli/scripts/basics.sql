-- ivm run --echo --until-quiet
-- Tables, a view kept up to date, queries in ORDER BY order, EXPLAIN with reused arrangements, \d.
CREATE TABLE customers (c_key INTEGER PRIMARY KEY, name TEXT NOT NULL, region TEXT);
CREATE TABLE orders (o_key INTEGER PRIMARY KEY, c_key INTEGER, total DECIMAL(12,2), day DATE);
INSERT INTO customers VALUES (1, 'ann', 'north'), (2, 'bob', 'south'), (3, 'cy', NULL);
INSERT INTO orders VALUES
  (10, 1, 10.50, DATE '2024-01-02'),
  (11, 1, 4.25, DATE '2024-01-03'),
  (12, 2, 99.99, NULL),
  (13, 3, 0.01, DATE '2024-02-01');
CREATE MATERIALIZED VIEW spend AS
  SELECT c.name, c.region, COUNT(*) AS n, SUM(o.total) AS total
  FROM customers c JOIN orders o ON c.c_key = o.c_key
  GROUP BY c.name, c.region;
SELECT * FROM spend ORDER BY total DESC;
UPDATE orders SET total = total * 2 WHERE c_key = 1;
DELETE FROM orders WHERE o_key = 12;
SELECT name, total FROM spend ORDER BY name;
SELECT region, SUM(n) AS orders FROM spend GROUP BY region ORDER BY region NULLS FIRST;
EXPLAIN SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON c.c_key = o.c_key GROUP BY c.name;
\d customers
SELECT 'semicolon; in a string' AS s, COUNT(*) AS n FROM orders; -- a comment; with semicolons
DROP VIEW spend;
SELECT COUNT(*) AS n FROM orders WHERE day >= DATE '2024-01-03';
