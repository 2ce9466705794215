-- The rows `put` writes and `count` counts (benchmarks P2r, P3c; the
-- concurrency tests). `key` is unique, so a row written twice is a conflict.
CREATE TABLE rows (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, at INTEGER NOT NULL);
