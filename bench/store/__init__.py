"""The SQLite results store, rows in and rows out, nothing derived: its tables and migrations (schema), opening,
checking and the sweeps' lifecycle (store), writing one result with its raw rows (write) and the one plain read
interface (read: any schema version, rows as stored). bench.analysis derives every number from what read returns."""
