"""Records: result records and their schema, provenance, statistics over them, atomic controller writes."""
