"""MLflow: everything the sweeper says to it and reads from it.

The driver alone writes a sweep's runs (`recorder`: one run per sweep, one nested run per cell),
from records computed without MLflow (`run_records`); `ui` is how a person opens them (the printed
`mlflow ui` line, the URL and its saved view); `database` is what sweeper reads and rewrites of
a SQLite tracking database itself, on a tested schema only; `locations` checks a tracking URI
before any work; `sync` logs again what a store's Parquet results hold and MLflow lacks
(`sweeper sync`).  What uses it sits above it: the checks (a tracking URI, before any work), the
sweep's listeners and runner (its runs), the summary (the lines that open them).
"""
