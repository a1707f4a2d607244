"""Graph-building neural-network modules (MAX's ``max.nn``; also importable as
``max.nn.legacy``, the name MAX 26.1/26.2 documents them under)."""
