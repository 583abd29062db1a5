"""Training artifacts: reproducible zstd tar bundles and the stores that keep them.

`bundle` packs a run's output directory into one `bundle.tar.zst` with a
`meta.json` inside; `store` keeps bundles by content digest on a local
directory or an S3 endpoint; `data` fetches input datasets into a local cache.
"""
