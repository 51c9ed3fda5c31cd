"""Results records: what a record is (schema.py: the step and the collective record, one constructor each; its `nccl`
section in nccl_facts.py), meta.json's one constructor (run_meta.py, its sections in meta_sections.py), the bounded
values and the vocabularies both hold (values.py, vocab.py), what a sweep planned (plan_file.py), a step record's
per-op times per size (op_sizes.py), the point-id grammar (point_ids.py) and where records live (files.py:
results.jsonl, meta.json, plan.jsonl, run folders)."""
