"""nccl-tests (*_perf) output as commprof reads it: text logs (text.py), -J files (json_file.py), records."""

from commprof.costmodel.nccl_tests.json_file import parse_json
from commprof.costmodel.nccl_tests.log import ParsedLog, Row, Run, gpu_name
from commprof.costmodel.nccl_tests.records import run_records
from commprof.costmodel.nccl_tests.text import parse_text

__all__ = ["ParsedLog", "Row", "Run", "gpu_name", "parse_json", "parse_text", "run_records"]
