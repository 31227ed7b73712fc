"""Import a transformer compiled by tracr into depthcert's exact model, every weight exact.

tracr (github.com/deepmind/tracr, on PyPI as tracr-pypi) compiles a RASP program into the
haiku parameters of `tracr.transformer.model.CompiledTransformerModel`.  Its forward pass
(tracr/transformer/model.py, attention.py, compiler/assemble.py), in row vectors:

    h_p   = Tok[token_p] + Pos[p]                          p = 0 is BOS; Pos[0] = 0
    per layer l:
      attention  q_i = h Wq_i + bq_i, k_i = h Wk_i + bk_i, v_i = h Wv_i + bv_i   (head i, key_size ks)
                 a_i[q, k] = softmax_k(q_i[q] . k_i[k] / sqrt(ks))      causal: keys k <= q
                 h <- h + sum_i (sum_k a_i[q, k] v_i[k]) Wl_i + bl       (heads summed)
      MLP        h <- h + relu(h W1 + b1) W2 + b2
    output: categorical: argmax over the output space's directions; numerical: its one direction

and no layer norm (the assembled config says layer_norm=False, activation relu; checked).
`import_tracr` turns this into a `depthcert.checkers.model.Model` with the same function,
using only exact identities (every float32 parameter is the dyadic rational it is):

  (a) the residual direction "one" is 1 at every position and no block writes to it (checked),
      so the affine terms fold through depthcert's constant row e: scores
      s_jk = (h_k Wq + bq) . (h_j Wk + bk) = h_j^T W_QK h_k with
      W_QK = (Wk + e bk)(Wq + e bq)^T; value biases fold into W_V's constant column (the
      attention weights of a query sum to 1); the output bias bl into one head's value;
  (b) depthcert averages a layer's m heads: every W_V (= (Wv_i Wl_i)^T) is multiplied by m;
      heads, hidden units and whole blocks that are exactly zero are dropped (they add 0);
  (c) the 1/sqrt(ks) is the head's exact scale (scale 1, scale_sqrt_divisor ks);
  (d) embeddings: if the token table is one-hot (plus "one") and the position table one-hot
      or zero, the residual basis is permuted so that they land where depthcert's input puts
      them ("permutation"; BOS's position row, which tracr leaves empty, becomes a row no
      weight reads); otherwise a first MLP-only layer reproduces both tables exactly
      ("mlp-table": ReLU passes the one-hot rows, W2 writes the table columns);
  (e) blocks keep their order: an attention block followed by an MLP block is one depthcert
      Layer (depthcert applies the MLP after the attention of the same layer);
  (f) the classifier reads the output space at every position (outputs "all"): classes are
      the output space's values (numerical programs: one row, the output direction).

tracr and jax are imported lazily: without the `tracr` extra, `require_tracr()` raises
BadInput (exit 2) with the install command.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from depthcert.checkers.errors import BadInput
from depthcert.checkers.layout import Block, Layout
from depthcert.checkers.model import MLP, Head, Layer, Model

INSTALL_HINT = 'verify-tracr needs the optional extra "tracr": pip install -e ".[tracr]" (tracr-pypi, jax, dm-haiku)'
BOS = "BOS"  # the name given to tracr's compiler BOS token


def require_tracr():
    """The tracr package, or BadInput (exit 2, one line) naming the extra to install."""
    try:
        import jax  # noqa: F401 (tracr's compiler needs jax and haiku; the first missing is named)
        import haiku  # noqa: F401
        import tracr.compiler.compiling  # noqa: F401
        import tracr
    except ImportError as exc:
        raise BadInput(f"{INSTALL_HINT} ({exc.name or exc} is missing)") from None
    return tracr


# ----------------------------------------------------------------------------------------------
# exact numbers

def exact_array(a) -> np.ndarray:
    """A float array (float32 parameters) as an object array of the exact Fractions it holds."""
    arr = np.asarray(a)
    if not np.all(np.isfinite(arr)):
        raise BadInput("a tracr parameter is not finite (NaN or inf)")
    flat = [Fraction(float(x)) for x in arr.astype(np.float64).ravel()]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(arr.shape)


def _zero(M: np.ndarray) -> bool:
    return all(v == 0 for v in M.ravel())


def _dyadic(M: np.ndarray) -> tuple[np.ndarray, int]:
    """M (Fractions with power-of-two denominators) = N * 2**-k with N Python ints."""
    k = max((v.denominator.bit_length() - 1 for v in M.ravel()), default=0)
    N = np.empty(M.shape, dtype=object)
    N.ravel()[:] = [v.numerator << (k - (v.denominator.bit_length() - 1)) for v in M.ravel()]
    return N, k


def exact_matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A @ B exactly for dyadic Fraction matrices (integer products, one division at the end)."""
    NA, ka = _dyadic(A)
    NB, kb = _dyadic(B)
    P = NA.dot(NB) if NA.size and NB.size else np.zeros((A.shape[0], B.shape[1]), dtype=object)
    den = 1 << (ka + kb)
    out = np.empty(P.shape, dtype=object)
    out.ravel()[:] = [Fraction(int(v), den) for v in P.ravel()]
    return out


def _zeros(*shape) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    out.fill(Fraction(0))
    return out


def _frozen(M: np.ndarray) -> np.ndarray:
    M = np.array(M, dtype=object)
    M.flags.writeable = False
    return M


# ----------------------------------------------------------------------------------------------
# the compiled program

@dataclass
class Compiled:
    """A RASP program compiled by tracr, with what the importer and the ground truth need."""

    program: object  # the rasp.SOp
    assembled: object  # tracr.compiler.assemble.AssembledTransformerModel
    vocab: tuple  # the input values, sorted as tracr's encoder orders them
    max_seq_len: int
    causal: bool
    categorical: bool
    output_values: tuple  # categorical: the output space's values in tracr's order
    output_label: str


def compile_program(program, vocab, max_seq_len: int, causal: bool = False, mlp_exactness: int = 100) -> Compiled:
    """tracr's compile_rasp_to_model with BOS named "BOS"; tracr's refusals become BadInput."""
    require_tracr()
    from tracr.compiler import compiling
    from tracr.rasp import rasp

    if not isinstance(program, rasp.SOp):
        raise BadInput(f"the program is not a RASP SOp (got {type(program).__name__})")
    if BOS in set(vocab):
        raise BadInput(f"the vocabulary may not contain {BOS!r} (tracr's BOS token is named so here)")
    try:
        assembled = compiling.compile_rasp_to_model(program, vocab=set(vocab), max_seq_len=max_seq_len,
                                                    causal=causal, compiler_bos=BOS,
                                                    mlp_exactness=mlp_exactness)
    except (NotImplementedError, ValueError, KeyError, TypeError, AssertionError) as exc:
        # tracr's whole reason on one line ("Unsupported RASP expressions:" is followed by one
        # line per expression naming it and why)
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        reason = (lines[0] + (" " + "; ".join(lines[1:]) if len(lines) > 1 else "")) if lines else type(exc).__name__
        raise BadInput(f"tracr cannot compile {program.label} with this vocabulary: {reason}") from None
    categorical = bool(rasp.is_categorical(program))
    enc = assembled.output_encoder
    values = tuple(enc.encoding_map) if categorical else ()
    tok = assembled.input_encoder.encoding_map
    order = tuple(t for t in tok if t not in (BOS, assembled.input_encoder.pad_token))
    return Compiled(program, assembled, order, max_seq_len, causal, categorical, values, program.label)


# ----------------------------------------------------------------------------------------------
# the importer

@dataclass(frozen=True)
class Imported:
    model: Model
    embedding: str  # "permutation" | "mlp-table"
    row_labels: tuple[str, ...]  # depthcert row -> what it holds (tracr residual label, or input row)
    class_values: tuple  # categorical: original output values in class order
    numerical: bool
    tracr_blocks: tuple[str, ...]  # the non-zero tracr blocks kept, in order ("layer_0/attn", ...)
    token_values: tuple  # depthcert vocab order as the original values (BOS included)
    notes: dict = field(default_factory=dict)


def _expected_params(n_layers: int) -> set[str]:
    keys = {"token_embed", "pos_embed"}
    for li in range(n_layers):
        for part in ("query", "key", "value", "linear"):
            keys.add(f"transformer/layer_{li}/attn/{part}")
        keys.add(f"transformer/layer_{li}/mlp/linear_1")
        keys.add(f"transformer/layer_{li}/mlp/linear_2")
    return keys


def check_config(assembled) -> None:
    """The assembled model must be the architecture the importer reads (no layer norm, ReLU)."""
    import jax

    cfg = assembled.model_config
    if cfg.layer_norm:
        raise BadInput("the tracr model uses layer norm; depthcert's model has none (not importable)")
    if cfg.activation_function is not jax.nn.relu:
        raise BadInput(f"the tracr model's MLP activation is {cfg.activation_function!r}, not ReLU")
    if cfg.dropout_rate:
        raise BadInput("the tracr model has dropout")
    keys = set(assembled.params)
    expected = _expected_params(cfg.num_layers)
    if keys != expected:
        extra = sorted(keys - expected) or sorted(expected - keys)
        raise BadInput(f"unexpected tracr parameter layout (e.g. {extra[0]!r})")


def _block_params(params, name: str) -> dict:
    return {k: exact_array(v) for k, v in params[name].items()}


def _attention_block(params, prefix: str, d: int, n_heads: int, ks: int):
    """[(W_QK_ext, OV_ext)] of the non-zero heads (coordinates: d tracr dims + the constant),
    W_V not yet multiplied by the head count; [] when the block adds nothing."""
    q, k, v, o = (_block_params(params, f"{prefix}/{p}") for p in ("query", "key", "value", "linear"))
    for name, p, shape in (("query", q, (d, n_heads * ks)), ("key", k, (d, n_heads * ks)),
                           ("value", v, (d, n_heads * ks)), ("linear", o, (n_heads * ks, d))):
        if p["w"].shape != shape:
            raise BadInput(f"{prefix}/{name}: weight shape {p['w'].shape}, expected {shape}")
    heads = []
    for i in range(n_heads):
        sl = slice(i * ks, (i + 1) * ks)
        Qe = np.vstack([q["w"][:, sl], q["b"][sl][None, :]])  # (d+1, ks): the last row reads the constant
        Ke = np.vstack([k["w"][:, sl], k["b"][sl][None, :]])
        Ve = np.vstack([v["w"][:, sl], v["b"][sl][None, :]])
        QK = exact_matmul(Ke, Qe.T)  # (d+1, d+1): key coordinate x query coordinate
        OV = _zeros(d + 1, d + 1)
        OV[:d, :] = exact_matmul(Ve, o["w"][sl, :]).T  # column c: what reading coordinate c writes
        heads.append([QK, OV])
    bl = o["b"]
    live = [i for i, (_, OV) in enumerate(heads) if not _zero(OV)]
    if not _zero(bl):
        target = live[0] if live else 0
        heads[target][1][:d, d] += bl  # the weights of a query sum to 1: bl rides on the constant
        live = sorted(set(live) | {target})
    return [tuple(heads[i]) for i in live]


def _mlp_block(params, prefix: str, d: int):
    """(W1_ext (f, d+1), b1 (f,), W2_ext (d+1, f), b2_ext (d+1,)) with only the hidden units
    that can contribute, or None when the block adds nothing."""
    l1 = _block_params(params, f"{prefix}/linear_1")
    l2 = _block_params(params, f"{prefix}/linear_2")
    W1, b1, W2, b2 = l1["w"], l1["b"], l2["w"], l2["b"]
    if W1.shape[0] != d or W2.shape != (W1.shape[1], d):
        raise BadInput(f"{prefix}: MLP shapes {W1.shape}, {W2.shape} do not fit d = {d}")
    keep = [f for f in range(W1.shape[1])
            if not _zero(W2[f]) and (not _zero(W1[:, f]) or b1[f] > 0)]
    if not keep and _zero(b2):
        return None
    if not keep:  # only the output bias: one idle hidden unit carries the shapes
        W1k, b1k, W2k = _zeros(1, d + 1), _zeros(1), _zeros(d + 1, 1)
    else:
        W1k = _zeros(len(keep), d + 1)
        W1k[:, :d] = W1[:, keep].T
        b1k = np.array([b1[f] for f in keep], dtype=object)
        W2k = _zeros(d + 1, len(keep))
        W2k[:d, :] = W2[keep, :].T
    b2k = _zeros(d + 1)
    b2k[:d] = b2
    return W1k, b1k, W2k, b2k


def _one_hot_index(row: np.ndarray, skip: int | None):
    """The index of the single entry 1 of row (ignoring index `skip`), None if row is zero
    there, False if the row is neither."""
    nz = [i for i, v in enumerate(row) if v != 0 and i != skip]
    if not nz:
        return None
    if len(nz) == 1 and row[nz[0]] == 1:
        return nz[0]
    return False


def import_tracr(compiled: Compiled, embedding: str = "auto", name: str | None = None) -> Imported:
    """depthcert's exact Model of a tracr-compiled program (see the module docstring)."""
    from depthcert.checkers.budget import charge_weights

    if embedding not in ("auto", "permutation", "mlp-table"):
        raise ValueError(f"embedding must be auto, permutation or mlp-table, got {embedding!r}")
    am = compiled.assembled
    check_config(am)
    cfg = am.model_config
    labels = list(am.residual_labels)
    d = len(labels)
    if len(set(labels)) != d:
        raise BadInput("tracr's residual labels are not unique: cannot locate the output space")
    H, ks = cfg.num_heads, cfg.key_size
    charge_weights(cfg.num_layers * (2 * H * (d + 1) ** 2 + 2 * (d + 1) * cfg.mlp_hidden_size),
                   f"the imported tracr model (d = {d}, {cfg.num_layers} layer{'s' if cfg.num_layers != 1 else ''}, {H} head{'s' if H != 1 else ''})")

    # -- the blocks, in tracr's order, exactly zero ones dropped
    blocks = []  # ("attn", [(QK, OV)]) | ("mlp", (W1, b1, W2, b2))
    kept_names = []
    for li in range(cfg.num_layers):
        heads = _attention_block(am.params, f"transformer/layer_{li}/attn", d, H, ks)
        if heads:
            blocks.append(("attn", heads))
            kept_names.append(f"layer_{li}/attn")
        mlp = _mlp_block(am.params, f"transformer/layer_{li}/mlp", d)
        if mlp is not None:
            blocks.append(("mlp", mlp))
            kept_names.append(f"layer_{li}/mlp")

    # -- the embedding tables
    enc = am.input_encoder
    tok_table = exact_array(am.params["token_embed"]["embeddings"])
    pos_table = exact_array(am.params["pos_embed"]["embeddings"])
    vocab_values = [t for t in enc.encoding_map if t != enc.pad_token]  # BOS included
    vocab = tuple(str(t) for t in vocab_values)
    if len(set(vocab)) != len(vocab):
        raise BadInput(f"two input tokens print the same ({vocab}): give tokens with distinct names")
    V, n = len(vocab), pos_table.shape[0]
    one = labels.index("one") if "one" in labels else None

    def writes_one() -> bool:
        if one is None:
            return False
        for kind, content in blocks:
            if kind == "attn" and any(not _zero(OV[one]) for _, OV in content):
                return True
            if kind == "mlp" and (not _zero(content[2][one]) or content[3][one] != 0):
                return True
        return False

    perm = None
    if embedding in ("auto", "permutation"):
        perm = _permutation(tok_table, pos_table, [enc.encoding_map[t] for t in vocab_values], one)
        if perm is not None and writes_one():
            perm = None
        if perm is None and embedding == "permutation":
            raise BadInput("the tracr embedding is not a one-hot permutation (or a block writes to \"one\")")
    const = V + n  # depthcert's constant row

    if perm is not None:
        tok_dir, pos_dir = perm
        row_of = {}  # tracr dim -> depthcert row
        for t, dim in enumerate(tok_dir):
            row_of[dim] = t
        for p, dim in enumerate(pos_dir):
            if dim is not None:
                row_of[dim] = V + p
        if one is not None:
            row_of[one] = const
        scratch = [i for i in range(d) if i not in row_of]
        for r, i in enumerate(scratch):
            row_of[i] = const + 1 + r
        D = const + 1 + len(scratch)
        mapping = np.array([row_of[i] for i in range(d)] + [const], dtype=np.int64)
        mode = "permutation"
    else:
        scratch = list(range(d))
        D = const + 1 + d
        mapping = np.array([const + 1 + i for i in range(d)] + [const], dtype=np.int64)
        mode = "mlp-table"
    charge_weights(len(blocks) * 2 * D * D, f"the imported tracr model (d' = {D})")

    def square(M):  # (d+1, d+1) -> (D, D); the merged coordinates ("one", constant) are both 1
        out = _zeros(D, D)
        np.add.at(out, (mapping[:, None], mapping[None, :]), M)
        return _frozen(out)

    def cols(M):  # (f, d+1) -> (f, D)
        out = _zeros(M.shape[0], D)
        np.add.at(out, (slice(None), mapping), M)
        return _frozen(out)

    def rows(M):  # (d+1, f) -> (D, f): rows are written; a merged row is never written (checked)
        out = _zeros(D, M.shape[1])
        np.add.at(out, (mapping, slice(None)), M)
        return _frozen(out)

    def vec(v):
        out = _zeros(D)
        np.add.at(out, mapping, v)
        return _frozen(out)

    layers = []
    if mode == "mlp-table":
        # layer 0: ReLU passes the V + n one-hot input rows; W2 writes the table columns
        W1 = _zeros(V + n, D)
        for r in range(V + n):
            W1[r, r] = Fraction(1)
        W2 = _zeros(D, V + n)
        for t, val in enumerate(vocab_values):
            W2[const + 1: const + 1 + d, t] = tok_table[enc.encoding_map[val]]
        for p in range(n):
            W2[const + 1: const + 1 + d, V + p] = pos_table[p]
        layers.append(Layer((), False, MLP(_frozen(W1), _frozen(_zeros(V + n)), _frozen(W2), _frozen(_zeros(D)))))
    i = 0
    while i < len(blocks):
        kind, content = blocks[i]
        if kind == "attn":
            m = len(content)
            heads = tuple(Head(square(QK), square(OV * m), attention="softmax", scale=Fraction(1),
                               scale_sqrt_divisor=Fraction(ks)) for QK, OV in content)
            mlp = None
            if i + 1 < len(blocks) and blocks[i + 1][0] == "mlp":
                W1, b1, W2, b2 = blocks[i + 1][1]
                mlp = MLP(cols(W1), _frozen(b1), rows(W2), vec(b2))
                i += 1
            layers.append(Layer(heads, bool(cfg.causal), mlp))
        else:
            W1, b1, W2, b2 = content
            layers.append(Layer((), False, MLP(cols(W1), _frozen(b1), rows(W2), vec(b2))))
        i += 1

    # -- the unembedding: the output space's directions
    if compiled.categorical:
        out_dirs = [f"{compiled.output_label}:{v}" for v in compiled.output_values]
        classes = tuple(str(v) for v in compiled.output_values)
        if len(set(classes)) != len(classes):
            raise BadInput(f"two output values print the same ({classes})")
    else:
        out_dirs = [str(compiled.output_label)]
        classes = ("value",)
    W_O = _zeros(len(out_dirs), D)
    for c, lab in enumerate(out_dirs):
        if lab not in labels:
            raise BadInput(f"output direction {lab!r} is not in tracr's residual stream")
        W_O[c, mapping[labels.index(lab)]] = Fraction(1)

    row_labels = [f"token {t}" for t in vocab] + [f"position {p}" for p in range(n)] + ["one"]
    row_labels += [""] * (D - len(row_labels))
    for i, r in enumerate(mapping[:d]):
        if r > const:
            row_labels[r] = labels[i]
    layout = _layout(V, n, row_labels[const + 1:])
    model = Model(vocab, n, classes, layout, tuple(layers), _frozen(W_O),
                  name=name or f"tracr:{compiled.output_label}", outputs="all", constant_row=True,
                  notes={"row_labels": tuple(row_labels), "tracr": True})
    return Imported(model, mode, tuple(row_labels), compiled.output_values, not compiled.categorical,
                    tuple(kept_names), tuple(vocab_values))


def _permutation(tok_table, pos_table, token_rows, one):
    """(token dims, position dims (None for an empty row)) when the tables are one-hot onto
    distinct residual directions, every token row also holding 1 at "one" and no position row
    touching it; else None."""
    tok_dir = []
    for r in token_rows:
        row = tok_table[r]
        if one is not None and row[one] != 1:
            return None
        j = _one_hot_index(row, one)
        if j is None or j is False:
            return None
        tok_dir.append(j)
    pos_dir = []
    for row in pos_table:
        if one is not None and row[one] != 0:
            return None
        j = _one_hot_index(row, one)
        if j is False:
            return None
        pos_dir.append(j)
    used = tok_dir + [j for j in pos_dir if j is not None]
    if len(set(used)) != len(used):
        return None
    return tok_dir, pos_dir


def _layout(V: int, n: int, scratch_labels) -> Layout:
    """token, position, one, then one block per tracr residual name ("tracr.opp_idx", ...)."""
    blocks = [Block("token", V), Block("position", n), Block("one", 1)]
    seen = {}
    prev, size = None, 0
    groups = []
    for lab in scratch_labels:
        key = lab.split(":", 1)[0] if lab else "unused"
        if key == prev:
            size += 1
        else:
            if prev is not None:
                groups.append((prev, size))
            prev, size = key, 1
    if prev is not None:
        groups.append((prev, size))
    for key, size in groups:
        nm = f"tracr.{key}"
        seen[nm] = seen.get(nm, 0) + 1
        if seen[nm] > 1:
            nm = f"{nm}.{seen[nm]}"
        blocks.append(Block(nm, size))
    return Layout(tuple(blocks))


# ----------------------------------------------------------------------------------------------
# tracr's own float forward (the comparison, never a verdict)

def _jitted(am):
    """tracr's forward under jax.jit (the same computation, compiled once per input length)."""
    import jax

    f = getattr(am, "_depthcert_jit", None)
    if f is None:
        f = jax.jit(am.forward)
        am._depthcert_jit = f
    return f


def float_forward(compiled: Compiled, inputs) -> list:
    """tracr's float32 forward on inputs of one length (each a tuple of values, BOS not
    included): per input, (decoded per position (BOS position: None), float output scores per
    position (categorical: the output space's values in class order; numerical: the value))."""
    import jax.numpy as jnp

    am = compiled.assembled
    if not inputs:
        return []
    enc = am.input_encoder.encoding_map
    toks = jnp.array([[enc[BOS]] + [enc[v] for v in x] for x in inputs])
    out = _jitted(am)(am.params, toks)
    resid = np.asarray(out.transformer_output.output, dtype=np.float64)  # (B, T, d)
    labels = list(am.residual_labels)
    if compiled.categorical:
        idx = [labels.index(f"{compiled.output_label}:{v}") for v in compiled.output_values]
    else:
        idx = [labels.index(str(compiled.output_label))]
    scores = resid[:, :, idx]
    unemb = np.asarray(out.unembedded_output)
    result = []
    for b in range(len(inputs)):
        if compiled.categorical:
            dec = [None] + [compiled.output_values[int(c)] for c in unemb[b, 1:]]
        else:
            dec = [None] + [float(x) for x in unemb[b, 1:]]
        result.append((dec, scores[b]))
    return result


# ----------------------------------------------------------------------------------------------
# certified output enclosures (the kernel's ball arithmetic, read out at one position)

ANCHOR = Fraction(2) ** 200  # the readout model's reference logit: far above any output here


def readout_model(model: Model) -> Model:
    """`model` with one more class, "anchor", first, whose logit is exactly ANCHOR (it reads the
    constant row).  Labelling a position "anchor" makes SoftmaxDecider.decide report every
    class's certified logit enclosure there at the first precision (the anchor is certainly
    above every output of these models, so the point is decided at once)."""
    from dataclasses import replace

    W = _zeros(len(model.classes) + 1, model.dim)
    W[0, model.constant_index] = ANCHOR
    W[1:, :] = model.W_O
    return replace(model, classes=("anchor",) + tuple(model.classes), W_O=_frozen(W), name=model.name + "+anchor")


class Readout:
    """Certified enclosures of a model's outputs at given positions (balls, `precision` bits)."""

    def __init__(self, model: Model, precision: int = 128):
        from depthcert.checkers.evaluate import Evaluator
        from depthcert.checkers.softmax_balls import SoftmaxDecider

        if model.constant_index is None:
            raise ValueError("the readout needs a model with a constant row")
        self.model = readout_model(model)
        self.decider = SoftmaxDecider(self.model, precision, precision)
        self.prefix = Evaluator(self.decider.prefix_model())

    def outputs(self, ids: np.ndarray, positions) -> list[list[list[tuple[Fraction, Fraction]]]]:
        """ids (B, n) model token rows; per input, per position in `positions`, every class's
        logit enclosure (lower, upper) in the model's class order."""
        Hnum, den = self.prefix.logits_all(ids)
        out = []
        for b in range(ids.shape[0]):
            per = []
            for pos in positions:
                dec = self.decider.decide(Hnum[b], den, [(pos, 0)], logits=True)
                if dec.status != "correct" or dec.position != pos or len(dec.logits) != len(self.model.classes):
                    raise RuntimeError(f"readout at position {pos} not decided ({dec.status}): an output "
                                       f"near {float(ANCHOR):.3g}?")
                per.append(list(dec.logits[1:]))
            out.append(per)
        return out
