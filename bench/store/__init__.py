"""The SQLite results store: its tables and migrations (schema), writing and reading rows (store), and a sweep read
back with every number derived from its raw rows (results)."""
