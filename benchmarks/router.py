"""Chapter 27: several minisgl servers behind sglang-router, round robin against cache-aware
routing on a shared-prefix workload (and, with --single, the same workload on one server).

    python benchmarks/router.py                       # CPU: two SmolLM2 servers, small KV pools
    python benchmarks/router.py --help                # the workload's and the servers' knobs

The workload, the servers and the router live in minisgl.benchmark.router (the chapter's tests
and main use them too); benchmarks/run_router_gpu.sh is the GPU call.
"""

import sys

from minisgl.benchmark.router import main

if __name__ == "__main__":
    sys.exit(main())
