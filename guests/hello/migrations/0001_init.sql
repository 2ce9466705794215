CREATE TABLE entries (
    id    INTEGER PRIMARY KEY,
    text  TEXT NOT NULL,
    added TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
