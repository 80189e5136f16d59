"""verify of all-mpnet-base-v2 cut to 4 layers / 128-d (default shrink settings) against its source.

    PYTHONPATH=$PWD python benchmarks/verify.py [--threads N]

Shrinks with `shrink(mpnet, layers=4, dim=128)` (spread layers, PCA head on the
shipped calibration corpus) into a temporary folder, then runs the CLI
`espresso-export verify` on STS-B test and the dbpedia-5k retrieval set (faiss
flat), batch sizes 1 and 32, and writes the report to
benchmarks/results/verify-mpnet-L4-d128.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _models import SHARED, mpnet, stsb  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    from espresso_export import shrink
    from espresso_export.cli.app import main as cli

    source = mpnet()
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="espresso-verify-"))
    try:
        load_before = os.getloadavg()[0]
        start, cpu = time.perf_counter(), time.process_time()
        shrunk = shrink(str(source), work / "mpnet-L4-d128", layers=4, dim=128)
        print(f"shrink: layers {shrunk.layers}, {shrunk.dim}-d {shrunk.head.value}, {shrunk.seconds:.1f} s")
        os.chdir(work)  # the report names the candidate by its folder name, not a temp path
        argv = ["verify", shrunk.output.name, "--against", str(source), "--sts", str(stsb("test")),
                "--retrieval", str(SHARED / "retrieval" / "dbpedia-5k"), "--batch-sizes", "1,32",
                "--json", str(results / "verify-mpnet-L4-d128.json"),
                "--markdown", str(results / "verify-mpnet-L4-d128.md")]
        if args.threads:
            argv += ["--threads", str(args.threads)]
        code = cli(argv)
        print(f"exit code {code}; wall time {time.perf_counter() - start:.1f} s, process CPU time "
              f"{time.process_time() - cpu:.1f} s; {os.cpu_count()} CPUs, load average {load_before:.1f} at start, "
              f"{os.getloadavg()[0]:.1f} at end")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
