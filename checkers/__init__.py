"""depthcert.checkers: the trusted kernel, the code every verdict rests on, and nothing else.

The kernel list (closed: a kernel module imports only kernel modules, the standard library, numpy,
python-flint, tqdm for progress bars, threadpoolctl (one BLAS thread per forked worker), and of scipy
two functions it trusts for a stated reason: scipy.special.erfc, assumed accurate to ERFC_REL
(2^-40 relative) on [ERFC_LOW, ERFC_HIGH] -- an assumption, checked against arb on 6,000 arguments
by tests/test_trained_components.py, not proven -- and scipy.sparse's CSR matrix product, trusted
to sum each dot product's non-zero float64 products in some order, which Higham's bound covers;
every .py file of this folder is listed here; checked by tests/test_kernel_boundary.py):

    errors.py                BadInput, the one exception for bad input
    budget.py                resource guards: weight entries and estimated seconds, refused before use
    rational.py              exact numbers from text ("p/q"), floats refused
    layout.py                named blocks of the residual stream, block matrices
    model.py                 the model classes and their semantics (the reference text)
    evaluate.py              exact integer evaluation, the proven float64 bound
    softmax_intervals.py     certified float64 intervals for softmax models, over whole batches
    softmax_balls.py         certified ball-arithmetic decisions for softmax models
    softmax_ties.py          exact decision of softmax ties (Lindemann-Weierstrass normal form)
    norm_activation_intervals.py  certified float64 intervals of LayerNorm/RMSNorm and gelu/silu
                             (the float stage of softmax_intervals; erfc from scipy, ERFC_REL above)
    norm_activation_balls.py  LayerNorm/RMSNorm and gelu/silu in arb balls (the per-point stage of
                             softmax_balls)
    rotary.py                rotary positions (cos/sin of the real angles in arb) and gated MLPs, in
                             certified intervals and balls (the softmax_intervals / softmax_balls stages)
    attention_tables.py      certified float64 tables of one-layer attention-only softmax models
    weight_balls.py          ball forward passes over weight intervals and float-format rounding (the
                             certified linf radius and float16/bfloat16/float32 verdicts of --robustness)
    trace.py                 per-point Fraction forward pass (the wider classes' slow reference)
    symmetry.py              the equivariance proof behind orbit representatives
    label_rules.py           every task's label from its definition, in plain Python (symmetry.py
                             recomputes each orbit representative's label with it)
    exhaustive.py            verify(): every point, strict argmax, verdicts
    hidden_table.py          one exact pass over a plan's points: the distinct hidden vectors a read-out is
                             fitted on, and the verdict of the fitted model from the same table
    shards.py                runs split into index ranges (processes, clusters), merged in index order
    journal.py               finished chunks on disk, so a killed run resumes with the same verdict
    accuracy.py              certified accuracy: every point decided correct / wrong / undecided, counted
    accuracy_journal.py      finished chunks of an accuracy run on disk (resume)
    generation.py            verify_generation(): every step of autoregressive generation (chain of thought)
    certificate.py           the independent certificate checker (standard library only)
    weights_file.py          the exact weights format: a file is the model a verdict is about
    atomic.py                JSON files read whole and written by rename (weights and dataset files)
    tasks/__init__.py        task names and make_task (plain imports of the families)
    tasks/base.py            Task, Batch, Point: what a dataset is
    tasks/classification.py  the SC enumerator (a verdict is about the dataset an enumerator defines)
    tasks/icqa.py            the ICQA enumerator
    tasks/template.py        the TM / ICTM enumerators
    tasks/multihop.py        the multi-hop enumerator
    tasks/logdepth.py        the parity, mod-count, word-problem and reachability enumerators
    tasks/composition.py     the function-composition enumerator
    tasks/max_of_k.py        the Max-of-K enumerator (Gross et al.)
    tasks/modular_addition.py  the modular-addition enumerator (Nanda et al.)
    tasks/induction.py       the induction enumerator (Olsson et al.)
    tasks/dataset_file.py    a user's dataset file as a task (a verdict is about that dataset)

Everything else calls in from above: searches and proofs (proofs/), constructions
(constructions/), commands (depthcert/cli/), importers (depthcert/interop/), training
(training/); docs/architecture.md draws the rooms.
"""
