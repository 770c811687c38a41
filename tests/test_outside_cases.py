"""Test cases of other checkers of stream programs, and real bug reports, written as specs
with `expect` lines.

tests/bugs/ holds bug reports of PyTorch, NCCL, DeepSpeed, Megatron-LM, vLLM, SGLang, CANN
projects and others (`*_bug`: the program as reported, `*_fix`: as fixed; each comment names
the issue and its address). tests/peers/ holds translations of CuSan's tests (`cusan*`: ahueck/cusan test/pass;
`ct_*`: tudasc/cusan-tests), PyTorch's CUDA stream sanitizer tests (`csan_*`:
test/test_cuda_sanitizer.py), and probes of the CUDA and CANN rules those tests rest on
(`edge*`, `x*`, `y*`), CANN's documented and implemented behaviour (`cann_*`: the AscendCL
docs and the runtime's source), NCCL's (`nccl_*`: the user guide's group, point-to-point and
collective rules, and its source) and the CUDA programming guide's (`cudadoc_*`), the MPI Bugs
Initiative's collective and point-to-point tests read with NCCL's rules (`mbi*`: MBI has MPI
verdicts; where NCCL's differ, as for eager buffering, the comment says so), and vendor sample
programs with mutants that drop one synchronization (`sample_*`: NVIDIA cuda-samples, ROCm
examples, Ascend samples, NCCL's examples). Each file's comment names its source and what it expects; where this
project's rule differs from the test's expectation the comment says why (docs/semantics.md).
Every engine must meet every expectation: `check` as users run it, the solver alone, and the
exhaustive search.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

HERE = Path(__file__).parent
PEERS = sorted(HERE.glob("peers/*.sched"))
BUGS = sorted(HERE.glob("bugs/*.sched"))

ENGINES = {"default": (), "solver": ("--explore-first", "0"), "exhaustive": ("--exhaustive",)}


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("spec", PEERS + BUGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_case(run, spec, engine):
    status, out, _ = run("check", *ENGINES[engine], "--format", "json", spec)
    result = json.loads(out)["files"][0]
    assert result["status"] != "error", result["diagnostics"]
    assert not any(f["kind"] == "unknown" for f in result["findings"]), result["findings"]
    unmet = [f["message"] for f in result["findings"] if not f["expected"]]
    assert result["passed"] and status == 0, unmet


def test_every_case_expects_something():
    """A spec without `expect` lines would pass whatever the verdict; every bug has its fix."""
    assert len(PEERS) > 100 and len(BUGS) > 50
    for spec in PEERS + BUGS:
        assert "\nexpect " in spec.read_text(), spec.name
    stems = {spec.stem for spec in BUGS}
    assert all(stem.removesuffix("_bug") + "_fix" in stems for stem in stems if stem.endswith("_bug"))
