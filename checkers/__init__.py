"""depthcert.checkers: the trusted core and the code around it.

The kernel, the code every verdict rests on (this list is
closed: a kernel module imports only kernel modules, the standard library, numpy,
python-flint and tqdm for progress bars; checked by tests/test_kernel_boundary.py):

    errors.py         BadInput, the one exception for bad input
    budget.py         resource guards: weight entries and estimated seconds, refused before use
    rational.py       exact numbers from text ("p/q"), floats refused
    layout.py         named blocks of the residual stream, block matrices
    model.py          the model classes and their semantics (the reference text)
    evaluate.py       exact integer evaluation, the proven float64 bound
    softmax_intervals.py  certified float64 intervals for softmax models, over whole batches
    softmax_balls.py  certified ball-arithmetic decisions for softmax models
    softmax_ties.py   exact decision of softmax ties (Lindemann-Weierstrass normal form)
    attention_tables.py certified float64 tables of one-layer attention-only softmax models
    trace.py          per-point Fraction forward pass (the wider classes' slow reference)
    symmetry.py       the equivariance proof behind orbit representatives
    tasks.py          Task, Batch, Point (what a dataset is), the ICQA / SC enumerators, make_task
    template_tasks.py the TM / ICTM enumerators (a verdict is about the dataset they define)
    multihop_task.py  the multi-hop enumerator
    max_of_k_task.py  the Max-of-K enumerator (Gross et al.)
    exhaustive.py     verify(): every point, strict argmax, verdicts
    shards.py         runs split into index ranges (processes, clusters), merged in index order
    journal.py        finished chunks on disk, so a killed run resumes with the same verdict
    accuracy.py       certified accuracy: every point decided correct / wrong / undecided, counted
    accuracy_journal.py finished chunks of an accuracy run on disk (resume)
    generation.py     verify_generation(): every step of autoregressive generation (chain of thought)
    certificate.py    the independent certificate checker (standard library only)

Around it, calling in: dataset_file.py and weights_file.py (file formats), dependence.py (LP
search for certificates and one-layer models; its certificates are re-checked by
certificate.py), atomic.py (file writing).
"""
