"""Training artifacts: reproducible zstd tar bundles and the stores that keep them.

`bundle` packs a run's output directory into one `bundle.tar.zst` with a
`meta.json` inside; `stores` keeps bundles by content digest on a local
directory or an S3 endpoint; `identity` pins a job's data to its content at publish;
`data` fetches it on a worker through `datacache` (by digest, verified, LRU).
"""
