"""depthcert.cli: the console commands, one module per command, and their output formatting.

    verify_construction.py  verify-construction (exhaustive check of a construction or --weights)
    cot.py                  verify-construction --cot (chain-of-thought generation, every step)
    reproduce_paper.py      reproduce-paper (every claim of the paper depthcert covers)
    find_dependence.py      find-dependence (one-layer impossibility certificate or one-layer model)
    check_certificate.py    check-certificate (re-check a certificate file)
    show_construction.py    show-construction (pictures of a construction's weights and attention)
    verify_tracr.py         verify-tracr (compile a RASP program with tracr, check it exactly)
    verify_model.py         verify-model (certified accuracy of a trained checkpoint on every point)
    export_transformerlens.py  export-transformerlens (a softmax model as a TransformerLens checkpoint)
    train_max_of_k.py       python -m depthcert.cli.train_max_of_k (the shipped Max-of-K checkpoint; "train" extra)
    train.py                train and reproduce (OBSERVED training runs; the "train" extra)
    all_sizes.py            verify-construction --all-sizes / --family (options, instance check, report)
    cluster.py              --dask of verify-construction and verify-model (a Dask runner for shards)
    common.py               what every command shares: parsing, budget options, number formatting
    errors.py               the wrapper every entry point runs in: exit codes, one-line errors

The top room: a command may import every other room; nothing imports a command.
"""
