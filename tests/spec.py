"""Facts of the MDS format document (shared/docs/mds-format.md) that several tests check."""

# The 11 keys of an MDS shard entry in index.json.
MDS_KEYS = frozenset(
    {
        "column_encodings",
        "column_names",
        "column_sizes",
        "compression",
        "format",
        "hashes",
        "raw_data",
        "samples",
        "size_limit",
        "version",
        "zip_data",
    }
)
