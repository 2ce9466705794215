CREATE TABLE headlines (
    id         TEXT PRIMARY KEY,
    title      TEXT NOT NULL,
    url        TEXT NOT NULL DEFAULT '',
    points     INTEGER NOT NULL DEFAULT 0,
    fetched_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
