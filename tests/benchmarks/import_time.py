"""How long `import autometrics` takes, next to `import pandas` measured in the same run.

    python tests/benchmarks/import_time.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys


def best_of(stmt: str, repeat: int = 7) -> float:
    code = f"import time; t=time.perf_counter(); {stmt}; print(time.perf_counter()-t)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout) for _ in range(repeat)]
    return statistics.median(runs)


if __name__ == "__main__":
    core = best_of("import autometrics")
    pandas = best_of("import pandas")
    bank = best_of("import autometrics.metricbank as m; m.list_metrics()")
    print(f"import autometrics            {1000 * core:8.1f} ms")
    print(f"import pandas (peer)          {1000 * pandas:8.1f} ms   ratio autometrics/pandas = {core / pandas:.3f}")
    print(f"MetricBank with all metrics   {1000 * bank:8.1f} ms")
