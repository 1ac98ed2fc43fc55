"""Traces: the trajectory store in SQLite."""

# Where the trace database lives; light constants, so the CLI can name them without
# importing the store (sqlite_utils pulls in pandas).
DB_ENV = "OPTIML_DB"
DEFAULT_DB = "optiml.db"
