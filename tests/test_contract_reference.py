"""The default pipeline against a third, independent reading of the language contract.

`contract_reference/reference.py` was written from the contract alone, without reading this
project's engines: a hand-written parser and an explicit-state search of every interleaving,
taking each rule literally (a collective group starts in one step once every member can, a
free kills its bytes when it takes effect, a use after free is an access running while its
bytes are dead). `contract_reference/generate.py` writes small contract-valid specs, half of
them collective-heavy. Every spec the reference decides within its state cap must get the
same conformance verdict from `check` as users run it (the fast path, the solver or the
explorer, whichever `check` picks). `STREAMPROOF_REFERENCE_SPECS` sets how many specs.
"""

from __future__ import annotations

import os

import pytest

from checker.analyze import check_loaded
from checker.frontend import load_text
from conftest import CONFORMANCE, expected_of, findings_verdict
from contract_reference.generate import gen_spec
from contract_reference.reference import check_text

SPECS = int(os.environ.get("STREAMPROOF_REFERENCE_SPECS", "40"))
SEED = 11
CAP = 150_000


def pipeline_verdict(text: str) -> dict:
    loaded = load_text(text, "<generated>")
    assert loaded.program is not None, loaded.diagnostics
    return findings_verdict([(loaded.program, check_loaded(loaded).findings)])


@pytest.mark.parametrize("index", range(SPECS))
def test_check_agrees_with_the_contract_reference(index):
    text = gen_spec(SEED, index)
    reference = check_text(text, cap=CAP)
    if "capped" in reference:
        pytest.skip(f"the reference stopped at {CAP:,} states")
    assert "verdict" in reference, reference
    assert pipeline_verdict(text) == reference["verdict"], text


@pytest.mark.parametrize("spec", sorted(CONFORMANCE.glob("c*.sched")), ids=lambda p: p.stem)
def test_the_reference_gives_the_conformance_verdicts(spec):
    # The reference is only an oracle if it reads the contract as its own examples do.
    assert check_text(spec.read_text())["verdict"] == expected_of(spec)
