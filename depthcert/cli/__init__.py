"""depthcert.cli: the console commands, one module per command, and their output formatting.

    verify_construction.py  verify-construction (exhaustive check of a construction or --weights)
    cot.py                  verify-construction --cot (chain-of-thought generation, every step)
    reproduce_paper.py      reproduce-paper (every claim of the paper depthcert covers)
    find_dependence.py      find-dependence (one-layer impossibility certificate or one-layer model)
    check_certificate.py    check-certificate (re-check a certificate file)
    show_construction.py    show-construction (pictures of a construction's weights and attention)
    verify_tracr.py         verify-tracr (compile a RASP program with tracr, check it exactly)
    train.py                train and reproduce (OBSERVED training runs; the "train" extra)
    cluster.py              verify-construction --cluster (a Dask runner for shards)
    common.py               what every command shares: parsing, budget options, number formatting

The top room: a command may import every other room; nothing imports a command.
"""
