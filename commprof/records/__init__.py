"""Results records: what a record is (schema.py: the step and the collective record, one constructor each),
the point-id grammar (point_ids.py) and where records live (files.py: results.jsonl, meta.json, run folders)."""
