"""The store: where a sweep's bytes live and the Parquet results people read.

`files` is how bytes reach a local folder or an object store whole (pyarrow's filesystems,
atomic writes, checksums, no write through a link); `artifacts` is the content-addressed store
on top (`ArtifactStore`: models, scores, manifests, the store's own marker); `columns` declares
the results' and scores' schemas with their versions; `results` the hive-partitioned dataset a
user loads, and how whole it is.
"""
