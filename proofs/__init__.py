"""depthcert.proofs: what proves or refutes the paper's claims.

    dependence.py          one-layer LP search: certificates (re-checked by checkers/certificate.py)
                           and one-layer models (re-checked by verify)
    all_sizes*.py          the all-size prover (a construction proved for every size of its family)
    check_all_sizes.py     the re-checker of an all-size proof
    theorems.py            the table of the paper's claims and how each is established
    readout.py             the max-margin read-out LP (re-checked by verify)
    robustness.py          linf radius, fewest bits, float formats: searches over kernel verdicts
    tracr_settings.py      verify-tracr's mlp_exactness / length searches over a check it is handed
    certificates/          stored certificates (package data)

Imports constructions/ and checkers/ only (docs/architecture.md).
"""
