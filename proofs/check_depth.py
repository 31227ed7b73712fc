"""Independent checker for depth lower-bound certificates of the relaxed hard-attention class R(L, H).

Standard library only; imports nothing from the project (docs/depth.md has the proof it implements).

The class R(L, H) (docs/depth.md, section 1).  A position's representation at layer 0 is its
(token, position) pair; at layer l it is (its layer-(l-1) representation, and for each head h the
SET of layer-(l-1) representations the head selects).  Head h of layer l at a query whose layer-(l-1)
representation is q selects, among the visible keys (every position; with "causal", positions
<= the query's), those whose representations are maximal under a total preorder P[l, h, q] of all
representations: an arbitrary function of (query, key) representations, the same wherever the
same query representation occurs.  Every average-hard (hardmax) attention-only transformer with H
heads per layer, one-hot token and position inputs, any width and any weights is in R(L, H): its
residual stream is a linear image of the vector below, and its scores are functions of the two
representations.  The read-out is linear in the vector of the last position's representation:

    vec(token t, position j) = e_("t", t) + e_("p", j)
    vec(rep at layer l)      = vec(previous rep) + sum_h sum_c (mean over the selected reps s of
                               vec(s)[c]) e_(l, h, c)

A certificate is a case split.  An internal node names a selection (layer l, head h, point p,
position i): the head's query is position i's layer-(l-1) representation in point p and the keys
are the representations visible from i.  Its children are the possible maximal sets M (listed by
key positions): the facts "all of M tie, every other key is strictly below M" are added for the
preorder P[l, h, q].  A maximal set the certificate does not list must contradict the facts
already on the path (the checker proves it: a cycle of >= through a strict >).  A leaf is a Farkas
vector mu[(point, class)] >= 0, not all 0, whose points' last-position vectors f_p are determined
by the facts on its path, with

    sum_(p, c) mu[p, c] (e_(label p) - e_c) (x) f_p = 0     (every class, every coordinate)

If a model of R(L, H) classified every listed point with a linear read-out W, its preorders satisfy
the facts of exactly one root-to-leaf path; at that leaf 0 < sum mu[p, c] (W_(label p) - W_c) . f_p
= W . 0 = 0.  So no model of R(L, H) classifies all points of the certificate correctly.

Version 3 is another proof of the same claim for B(L, H): a clausal refutation, checked by
check_clausal.py beside this file (its docstring has the argument).

Use: `check(obj) -> (ok, message)`, or `python check_depth.py FILE` (exit 0 valid, 1 invalid,
2 malformed or unreadable, 4 internal error).
"""
import json
import os
import sys
from fractions import Fraction
from itertools import combinations

if __package__:
    from . import check_clausal
else:  # run as a script: the file beside this one, whatever sys.path holds (python -I included)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import check_clausal

FORMAT = "depthcert.depth-certificate"
VERSION = 2  # written by the case-split search; version 1 (the relaxed class R(L, H)) is still read
VERSIONS = (1, 2, 3)  # version 3: a clausal proof of B(L, H) (proofs/check_clausal.py)
MAX_KEYS = 16  # a split over more keys would make the checker enumerate 2^keys sets


Malformed = check_clausal.Malformed  # the certificate is not well-formed; the message names the field
Invalid = check_clausal.Invalid  # well-formed, but it does not prove its claim; the message says where


# ------------------------------------------------------------------ task labels, re-derived

class _Names:
    """The tokens prefix + "0", ..., prefix + str(n - 1), tested by parsing (a certificate's size
    parameter may be huge: nothing of size n is built)."""

    def __init__(self, prefix, n):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError("a size parameter must be an int, got " + repr(n))
        self.prefix, self.n = prefix, n

    def __ge__(self, tokens):
        return all(self._has(t) for t in tokens)

    def __contains__(self, t):
        return self._has(t)

    def _has(self, t):
        if not isinstance(t, str) or not t.startswith(self.prefix):
            return False
        digits = t[len(self.prefix):]
        if not digits or not digits.isascii() or not digits.isdigit() or (digits[0] == "0" and digits != "0"):
            return False
        return len(digits) <= len(str(self.n)) and int(digits) < self.n


def _names(prefix, n):
    return _Names(prefix, n)


def _label_icqa(tokens, params):
    k = params["k"]
    if len(tokens) != 3 * k + 2 or tokens[-1] != "=":
        return None
    qs = [tokens[3 * i] for i in range(k)]
    ans = [tokens[3 * i + 2] for i in range(k)]
    if any(tokens[3 * i + 1] != "=" for i in range(k)) or len(set(qs)) != k or len(set(ans)) != k:
        return None
    if not set(qs) <= _names("q", params["n_questions"]) or not set(ans) <= _names("a", params["n_answers"]):
        return None
    if tokens[-2] not in qs:
        return None
    return ans[qs.index(tokens[-2])]


def _pattern(seq):
    seen, out = {}, []
    for t in seq:
        seen.setdefault(t, len(seen))
        out.append(seen[t])
    return out


def _pattern_name(p):
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    if p and max(p) < len(letters):
        return "".join(letters[v] for v in p)
    return ".".join(str(v) for v in p)


def _label_tm(tokens, params):
    l = params["l"]
    if len(tokens) != l + 1 or tokens[-1] != "<cls>" or not set(tokens[:l]) <= _names("t", params["alphabet"]):
        return None
    return _pattern_name(_pattern(tokens[:l]))


def _label_ictm(tokens, params):
    k, l = params["k"], params["l"]
    step = l + 2
    if len(tokens) != k * step + l + 1 or tokens[-1] != "=":
        return None
    pats = [_pattern(tokens[i * step: i * step + l]) for i in range(k)]
    ans = [tokens[i * step + l + 1] for i in range(k)]
    if any(tokens[i * step + l] != "=" for i in range(k)) or len(set(ans)) != k:
        return None
    if len(set(tuple(p) for p in pats)) != k or not set(ans) <= _names("a", params["n_answers"]):
        return None
    questions = [t for i in range(k + 1) for t in tokens[i * step: i * step + l]]
    if not set(questions) <= _names("x", params["alphabet"]):
        return None
    q = _pattern(tokens[k * step: k * step + l])
    if q not in pats:
        return None
    c = pats.index(q)
    if params.get("query", "any") == "new" and tokens[k * step: k * step + l] == tokens[c * step: c * step + l]:
        return None
    return ans[c]


def _label_multihop(tokens, params):
    k, hops = params["k"], params["hops"]
    if len(tokens) != 3 * k + 2 or tokens[-1] != ">":
        return None
    src = [tokens[3 * i] for i in range(k)]
    if len(set(src)) != k or any(tokens[3 * i + 1] != ">" for i in range(k)):
        return None
    n = params["n_entities"]
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError("n_entities must be an int")
    names = {chr(ord("a") + i) for i in range(n)} if n <= 26 else _names("e", n)
    if not set(src) <= names or any(tokens[3 * i + 2] not in src for i in range(k)):
        return None
    f = {src[i]: tokens[3 * i + 2] for i in range(k)}
    x = tokens[-2]
    for _ in range(hops):
        if x not in f:
            return None
        x = f[x]
    return x


def _label_parity(tokens, params):
    if len(tokens) != params["n"] or any(t not in ("0", "1") for t in tokens):
        return None
    return str(tokens.count("1") % 2)


def _label_composition(tokens, params):
    L, N = params["L"], params["N"]
    dom = [str(v) for v in range(N)]
    if len(tokens) != L * N + 1 or any(t not in dom for t in tokens):
        return None
    x = int(tokens[-1])
    for i in range(L):
        x = int(tokens[i * N + x])
    return str(x)


def _label_copy(tokens, params):
    """A prefix of the copy task's input (x_0..x_{n-1} | x_0..x_{i-1}) ending at a labelled
    position; its label is x_i (teacher forcing: training/copy_task.py)."""
    n = params["length"]
    if len(tokens) < n + 1 or len(tokens) > 2 * n or tokens[n] != "|":
        return None
    if not set(tokens[:n]) <= _names("t", params["alphabet"]):
        return None
    i = len(tokens) - n - 1
    if list(tokens[n + 1:]) != list(tokens[:i]) or "|" in tokens[:n]:
        return None
    return tokens[i]


def _label_pointer(tokens, params):
    """Pointer chasing: f(0) .. f(N-1), then x; the label is f^hops(x) (digits)."""
    N, hops = params["N"], params["hops"]
    if isinstance(N, bool) or not isinstance(N, int) or isinstance(hops, bool) or not isinstance(hops, int):
        raise TypeError("N and hops must be ints")
    dom = [str(v) for v in range(N)] if N <= 10 else []
    if len(tokens) != N + 1 or any(t not in dom for t in tokens) or hops < 0:
        return None
    x = int(tokens[-1])
    for _ in range(hops):
        x = int(tokens[x])
    return str(x)


LABEL_RULES = {"icqa": _label_icqa, "tm": _label_tm, "ictm": _label_ictm, "multihop": _label_multihop,
               "parity": _label_parity, "composition": _label_composition, "copy": _label_copy,
               "pointer": _label_pointer}


# ------------------------------------------------------------------ representations

def rep0(tokens, i):
    return ("x", tokens[i], i)


def vector(rep, memo):
    """The exact vector of a representation: {coordinate: Fraction} (zero entries left out)."""
    if isinstance(rep, frozenset):  # version 2: a node is its vector (coordinate, value) pairs
        return dict(rep)
    got = memo.get(rep)
    if got is not None:
        return got
    if rep[0] == "x":
        out = {("t", rep[1]): Fraction(1), ("p", rep[2]): Fraction(1)}
    else:
        _, layer, prev, sels = rep
        out = dict(vector(prev, memo))
        for h, sel in enumerate(sels):
            share = Fraction(1, len(sel))
            for s in sel:
                for c, v in vector(s, memo).items():
                    key = (layer, h, c)
                    out[key] = out.get(key, 0) + share * v
        out = {c: v for c, v in out.items() if v}
    memo[rep] = out
    return out


class Facts:
    """The facts on a path: per preorder key (layer, head, query rep) a set of edges a >= b
    (strict = a > b).  Immutable: `add` returns a new object."""

    __slots__ = ("edges", "_closure")

    def __init__(self, edges=None):
        self.edges = edges or {}
        self._closure = {}

    def closure(self, key):
        """(ge, gt): for each node the nodes it is >= / > of, by transitivity of the edges."""
        got = self._closure.get(key)
        if got is not None:
            return got
        adj = {}
        for a, b, strict in self.edges.get(key, ()):
            adj.setdefault(a, []).append((b, strict))
            adj.setdefault(b, [])
        ge, gt = {}, {}
        for s in adj:
            best = {s: 0}
            stack = [(s, 0)]
            while stack:
                u, f = stack.pop()
                for v, st in adj[u]:
                    g = 1 if (f or st) else 0
                    if best.get(v, -1) < g:
                        best[v] = g
                        stack.append((v, g))
            ge[s] = set(best)
            gt[s] = {v for v, g in best.items() if g}
        self._closure[key] = (ge, gt)
        return ge, gt

    def consistent(self, key):
        ge, gt = self.closure(key)
        return all(a not in gt[a] for a in gt)

    def add(self, key, maxset, keys):
        """The facts of "maxset is the maximal set of keys" added to the preorder `key`."""
        maxset = list(maxset)
        top = maxset[0]
        new = set(self.edges.get(key, ()))
        for m in maxset[1:]:
            new.add((top, m, False))
            new.add((m, top, False))
        for b in keys:
            if b not in maxset:
                new.add((top, b, True))
        return self._with(key, new)

    def _with(self, key, new):
        """These facts with preorder `key`'s edges replaced by `new` (the other closures kept)."""
        edges = dict(self.edges)
        edges[key] = frozenset(new)
        out = Facts(edges)
        for k, v in self._closure.items():
            if k != key:
                out._closure[k] = v
        return out

    def relate(self, key, a, b, rel):
        """The facts with "a rel b" (rel in ">", "=", "<") added to the preorder `key`."""
        new = set(self.edges.get(key, ()))
        if rel == ">":
            new.add((a, b, True))
        elif rel == "<":
            new.add((b, a, True))
        else:
            new.add((a, b, False))
            new.add((b, a, False))
        return self._with(key, new)

    def maximal(self, key, keys):
        """The maximal set of `keys` if the facts determine it (the same under every total
        preorder satisfying them), else None."""
        if len(keys) == 1:
            return frozenset(keys)
        ge, gt = self.closure(key)
        top = [a for a in keys if a in ge and all(b in ge[a] for b in keys)]
        if not top:
            return None
        for b in keys:
            if b not in top and not any(b in gt[a] for a in top):
                return None
        return frozenset(top)


_CANONICAL = {}


def canonical(x):
    """A text naming a representation, a vector node or an edge, the same in every process (the
    iteration order of a frozenset depends on string hashing, which Python salts per process):
    searches sort by it so that their certificates do not depend on the process."""
    if isinstance(x, frozenset):
        got = _CANONICAL.get(x)
        if got is None:
            if len(_CANONICAL) > 200_000:
                _CANONICAL.clear()
            got = _CANONICAL[x] = "{" + ",".join(sorted(canonical(y) for y in x)) + "}"
        return got
    if isinstance(x, tuple):
        return "(" + ",".join(canonical(y) for y in x) + ")"
    return repr(x)


def sorted_edges(edges):
    """The edges of a preorder in an order that is the same in every process."""
    return sorted(edges, key=canonical)


def is_need(x):
    """Whether an Evaluator answer is ("need", layer, head, position): an open selection."""
    return isinstance(x, tuple) and len(x) == 4 and x[0] == "need"


class Evaluator:
    """Representations of the points' positions under a set of facts (causal or not)."""

    def __init__(self, points, layers, heads, causal, exact=False):
        self.points, self.layers, self.heads, self.causal = points, layers, heads, causal
        self.labels = {y for _, y in points}
        self.memo = {}
        # exact (version 2): a representation is its vector, a frozenset of (coordinate, value):
        # scores of a bilinear model are functions of the two vectors, so equal vectors share facts
        self.exact = exact
        self._nodes = {}  # exact: one object per vector, so set and dict look-ups hit by identity

    def _intern(self, node):
        return self._nodes.setdefault(node, node)

    def rep0(self, toks, i):
        if self.exact:
            return self._intern(frozenset(((("t", toks[i]), Fraction(1)), (("p", i), Fraction(1)))))
        return rep0(toks, i)

    def next_rep(self, l, prev, sels):
        """The layer-l representation of a position whose layer-(l-1) one is prev, given the
        maximal sets (one per head) it selects."""
        if not self.exact:
            return ("r", l, prev, tuple(sels))
        out = dict(prev)
        for h, sel in enumerate(sels):
            share = Fraction(1, len(sel))
            for s in sel:
                for c, v in s:
                    key = (l, h, c)
                    out[key] = out.get(key, 0) + share * v
        return self._intern(frozenset((c, v) for c, v in out.items() if v))

    def visible(self, n, i):
        return range(i + 1) if self.causal else range(n)

    def reps(self, facts, p, upto):
        """Layer-`upto` representations of every position of point p, or ("need", l, h, i) for
        the first selection (in layer, position, head order) the facts leave open."""
        toks = self.points[p][0]
        n = len(toks)
        cur = [self.rep0(toks, i) for i in range(n)]
        for l in range(1, upto + 1):
            nxt = []
            for i in range(n):
                keys = [cur[j] for j in self.visible(n, i)]
                sels = []
                for h in range(self.heads):
                    m = facts.maximal((l, h, cur[i]), keys)
                    if m is None:
                        return ("need", l, h, i)
                    sels.append(m)
                nxt.append(self.next_rep(l, cur[i], sels))
            cur = nxt
        return cur

    def final(self, facts, p):
        """The last position's layer-L representation of point p, or ("need", l, h, i)."""
        toks = self.points[p][0]
        n = len(toks)
        prev = self.reps(facts, p, self.layers - 1)
        if is_need(prev):
            return prev
        i = n - 1
        keys = [prev[j] for j in self.visible(n, i)]
        sels = []
        for h in range(self.heads):
            m = facts.maximal((self.layers, h, prev[i]), keys)
            if m is None:
                return ("need", self.layers, h, i)
            sels.append(m)
        return self.next_rep(self.layers, prev[i], sels)

    def split(self, facts, l, h, p, i):
        """(preorder key, key reps by position) of the selection (l, h, p, i), or None if the
        layer-(l-1) representations it needs are not determined."""
        toks = self.points[p][0]
        prev = self.reps(facts, p, l - 1)
        if is_need(prev):
            return None
        pos = list(self.visible(len(toks), i))
        return (l, h, prev[i]), {j: prev[j] for j in pos}


# ------------------------------------------------------------------ parsing

_frac = check_clausal.frac


def _int(obj, name, low, high):
    v = obj.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise Malformed(name + ": expected an int in " + str(low) + ".." + str(high) + ", got " + repr(v))
    return v


def parse(obj):
    if not isinstance(obj, dict):
        raise Malformed("certificate: expected a JSON object")
    if obj.get("format") != FORMAT:
        raise Malformed("format: expected " + repr(FORMAT) + ", got " + repr(obj.get("format")))
    version = obj.get("version")
    if isinstance(version, bool) or version not in VERSIONS:
        raise Malformed("version: expected one of " + str(list(VERSIONS)) + ", got " + repr(version))
    # no free-text "claims": the claim printed is the one the checker derives from the fields
    body = "proof" if version == 3 else "tree"
    unknown = sorted(set(obj) - {"format", "version", "task", "layers", "heads", "causal", "points", body})
    if unknown:
        raise Malformed("unknown field " + repr(unknown[0]))
    layers = _int(obj, "layers", 1, 8)
    heads = _int(obj, "heads", 1, 8)
    causal = obj.get("causal")
    if not isinstance(causal, bool):
        raise Malformed("causal: expected true or false")
    task = obj.get("task")
    rule = params = None
    if task is not None:
        if not isinstance(task, dict) or not isinstance(task.get("name"), str) or not isinstance(task.get("params"), dict):
            raise Malformed("task: expected {\"name\": ..., \"params\": {...}} or null")
        if task["name"] not in LABEL_RULES:
            raise Malformed("task.name: no label rule for " + repr(task["name"]))
        rule, params = LABEL_RULES[task["name"]], task["params"]
        for k, v in params.items():
            if not isinstance(v, (int, str)) or isinstance(v, bool):
                raise Malformed("task.params." + str(k) + ": expected an int or a string")
    pts = obj.get("points")
    if not isinstance(pts, list) or not pts:
        raise Malformed("points: expected a non-empty list")
    points = []
    seen = set()
    for i, p in enumerate(pts):
        where = "points[" + str(i) + "]"
        if not isinstance(p, dict) or sorted(p) != ["label", "tokens"]:
            raise Malformed(where + ": expected {\"tokens\": [...], \"label\": ...}")
        toks = p["tokens"]
        if not isinstance(toks, list) or not toks or not all(isinstance(t, str) for t in toks):
            raise Malformed(where + ".tokens: expected a non-empty list of strings")
        if not isinstance(p["label"], str):
            raise Malformed(where + ".label: expected a string")
        toks = tuple(toks)
        if toks in seen:
            raise Malformed(where + ": sequence listed twice")
        seen.add(toks)
        if rule is not None:
            try:
                want = rule(list(toks), params)
            except (KeyError, TypeError, ValueError) as exc:
                raise Malformed("task.params: " + str(exc)) from None
            if want is None:
                raise Invalid(where + ": not a point of task " + task["name"])
            if want != p["label"]:
                raise Invalid(where + ": label " + repr(p["label"]) + ", but the task's rule gives " + repr(want))
        points.append((toks, p["label"]))
    if body not in obj:
        raise Malformed(body + ": missing")
    return version, layers, heads, causal, points, obj[body]


# ------------------------------------------------------------------ the check

def check_tree(ev, tree):
    """Walk the case split; return (nodes, leaves) or raise Invalid / Malformed."""
    nodes = leaves = 0
    stack = [(tree, Facts(), "tree")]
    while stack:
        node, facts, where = stack.pop()
        nodes += 1
        if not isinstance(node, dict):
            raise Malformed(where + ": expected an object")
        kinds = [k for k in ("farkas", "head_farkas", "split", "compare") if k in node]
        allowed = {"farkas": {"farkas"}, "head_farkas": {"head_farkas"}, "split": {"split", "children"},
                   "compare": {"compare", "children"}}
        if len(kinds) != 1 or set(node) != allowed[kinds[0]]:
            raise Malformed(where + ": expected exactly one of {farkas}, {head_farkas}, {split, children}, "
                            "{compare, children}; got keys " + str(sorted(node)))
        if kinds[0] in ("head_farkas", "compare") and not ev.exact:
            raise Malformed(where + ": " + kinds[0] + " nodes need version 2 (the bilinear class)")
        if "farkas" in node:
            leaves += 1
            _check_leaf(ev, node["farkas"], facts, where + ".farkas")
            continue
        if "head_farkas" in node:
            leaves += 1
            _check_head_leaf(ev, node["head_farkas"], facts, where + ".head_farkas")
            continue
        if "compare" in node:
            stack.extend(_compare_children(ev, node, facts, where))
            continue
        split = node.get("split")
        if not isinstance(split, dict) or sorted(split) != ["head", "layer", "point", "position"]:
            raise Malformed(where + ".split: expected {layer, head, point, position}")
        l, h, p, i = (split.get(k) for k in ("layer", "head", "point", "position"))
        for name, v, hi in (("layer", l, ev.layers), ("head", h, ev.heads - 1), ("point", p, len(ev.points) - 1)):
            if isinstance(v, bool) or not isinstance(v, int) or not (1 if name == "layer" else 0) <= v <= hi:
                raise Malformed(where + ".split." + name + ": out of range: " + repr(v))
        n = len(ev.points[p][0])
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
            raise Malformed(where + ".split.position: out of range: " + repr(i))
        got = ev.split(facts, l, h, p, i)
        if got is None:
            raise Invalid(where + ": the split's query and keys are not determined by the facts above it")
        key, keyreps = got
        if len(keyreps) > MAX_KEYS:
            raise Invalid(where + ": a split over " + str(len(keyreps)) + " keys (limit " + str(MAX_KEYS) + ")")
        children = node.get("children")
        if not isinstance(children, list):
            raise Malformed(where + ".children: expected a list")
        listed = set()
        for ci, ch in enumerate(children):
            cw = where + ".children[" + str(ci) + "]"
            if not isinstance(ch, dict) or sorted(ch) != ["max", "node"]:
                raise Malformed(cw + ": expected {\"max\": [positions], \"node\": ...}")
            mx = ch["max"]
            if (not isinstance(mx, list) or not mx or any(isinstance(j, bool) or not isinstance(j, int) or j not in keyreps for j in mx)
                    or len(set(mx)) != len(mx)):
                raise Malformed(cw + ".max: expected distinct visible key positions")
            fs = frozenset(mx)
            if fs in listed:
                raise Malformed(cw + ".max: listed twice")
            listed.add(fs)
            stack.append((ch["node"], facts.add(key, [keyreps[j] for j in sorted(mx)], list(keyreps.values())),
                          cw + ".node"))
        # every maximal set not listed must contradict the facts
        for sub in possible_maxsets(facts, key, keyreps):
            if frozenset(sub) not in listed:
                raise Invalid(where + ": the maximal set at positions " + str(list(sub)) + " is possible but not covered")
    return nodes, leaves


RELATIONS = (">", "=", "<")


def _query(ev, facts, spec, where):
    """(preorder key, {position: key representation}) of a {layer, head, point, position} spec."""
    l, h, p, i = (spec.get(k) for k in ("layer", "head", "point", "position"))
    for name, v, lo, hi in (("layer", l, 1, ev.layers), ("head", h, 0, ev.heads - 1),
                            ("point", p, 0, len(ev.points) - 1)):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise Malformed(where + "." + name + ": out of range: " + repr(v))
    n = len(ev.points[p][0])
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
        raise Malformed(where + ".position: out of range: " + repr(i))
    got = ev.split(facts, l, h, p, i)
    if got is None:
        raise Invalid(where + ": the query's and keys' representations are not determined by the facts above it")
    return got


def _key_position(keyreps, j, where):
    if isinstance(j, bool) or not isinstance(j, int) or j not in keyreps:
        raise Malformed(where + ": not a key position visible from the query: " + repr(j))
    return keyreps[j]


def _compare_children(ev, node, facts, where):
    """A comparison split (version 2): the score of key a against key b at one query is >, = or
    < (trichotomy of the reals), so the three children cover every model; each adds its fact."""
    spec = node["compare"]
    if not isinstance(spec, dict) or sorted(spec) != ["head", "keys", "layer", "point", "position"]:
        raise Malformed(where + ".compare: expected {layer, head, point, position, keys}")
    key, keyreps = _query(ev, facts, spec, where + ".compare")
    ks = spec["keys"]
    if not isinstance(ks, list) or len(ks) != 2:
        raise Malformed(where + ".compare.keys: expected two key positions")
    a = _key_position(keyreps, ks[0], where + ".compare.keys[0]")
    b = _key_position(keyreps, ks[1], where + ".compare.keys[1]")
    if ks[0] == ks[1]:
        raise Malformed(where + ".compare.keys: the same position twice")
    children = node["children"]
    if not isinstance(children, dict) or sorted(children) != sorted(RELATIONS):
        raise Malformed(where + ".children: expected an object with the keys \">\", \"=\", \"<\"")
    return [(children[r], facts.relate(key, a, b, r), where + ".children[" + repr(r) + "]") for r in RELATIONS]


def _check_head_leaf(ev, leaf, facts, where):
    """A head whose facts on the path have no bilinear score (version 2).  rows: [point, query
    position, key a, key b, relation, coefficient] with relation ">" (a strictly above b, known
    from the facts by transitivity; coefficient >= 0) or "=" (a and b tie; any sign), for one
    (layer, head).  In a model with score v_k^T M v_q the rows say (v_a - v_b)^T M v_q > 0 or = 0;
    if sum coef (v_a - v_b) (x) v_q = 0 and the ">" coefficients sum to > 0, then
    0 < sum coef (v_a - v_b)^T M v_q = <M, 0> = 0: no M satisfies the facts."""
    if not isinstance(leaf, dict) or sorted(leaf) != ["head", "layer", "rows"]:
        raise Malformed(where + ": expected {layer, head, rows}")
    rows = leaf["rows"]
    if not isinstance(rows, list) or not rows:
        raise Malformed(where + ".rows: expected a non-empty list")
    total = {}
    strict = Fraction(0)
    for k, row in enumerate(rows):
        w = where + ".rows[" + str(k) + "]"
        if not isinstance(row, list) or len(row) != 6:
            raise Malformed(w + ": expected [point, query position, key a, key b, relation, coefficient]")
        p, i, ja, jb, rel, v = row
        key, keyreps = _query(ev, facts, {"layer": leaf["layer"], "head": leaf["head"], "point": p, "position": i}, w)
        a = _key_position(keyreps, ja, w + " key a")
        b = _key_position(keyreps, jb, w + " key b")
        coef = _frac(v, w)
        ge, gt = facts.closure(key)
        if rel == ">":
            if b not in gt.get(a, ()):
                raise Invalid(w + ": the facts on the path do not put key " + str(ja) + " strictly above key " + str(jb))
            if coef < 0:
                raise Invalid(w + ": negative coefficient on a strict row")
            strict += coef
        elif rel == "=":
            if a != b and not (b in ge.get(a, ()) and a in ge.get(b, ())):
                raise Invalid(w + ": the facts on the path do not tie keys " + str(ja) + " and " + str(jb))
        else:
            raise Malformed(w + ": relation must be \">\" or \"=\"")
        if coef == 0:
            continue
        vq, va, vb = vector(key[2], ev.memo), vector(a, ev.memo), vector(b, ev.memo)
        for c in set(va) | set(vb):
            d = va.get(c, 0) - vb.get(c, 0)
            if d:
                for cq, x in vq.items():
                    total[(c, cq)] = total.get((c, cq), 0) + coef * d * x
    if strict <= 0:
        raise Invalid(where + ": the strict rows' coefficients do not sum to a positive number")
    for c, val in total.items():
        if val != 0:
            raise Invalid(where + ": entry (key " + repr(c[0]) + ", query " + repr(c[1]) + ") sums to " + str(val)
                          + ", not 0")


def possible_maxsets(facts, key, keyreps):
    """Every set of key positions that can be the maximal set under some total preorder that
    satisfies the facts (increasing size).  A set holding a key that the facts put strictly below
    another key is impossible (it would tie or beat that key); the others are tested by adding
    their facts and looking for a cycle of >= through a strict >."""
    ge, gt = facts.closure(key)
    vals = list(keyreps.values())
    free = [j for j in sorted(keyreps) if not any(keyreps[j] in gt.get(b, ()) for b in vals)]
    if not facts.consistent(key):
        return
    for r in range(1, len(free) + 1):
        for sub in combinations(free, r):
            inside = [keyreps[j] for j in sub]
            if all(not _clash(ge, gt, a, b, b in inside) for a in inside for b in vals):
                yield list(sub)


def _clash(ge, gt, a, b, b_inside):
    """Adding "a is maximal" (ties with the set, strictly above the other keys) to consistent
    facts closes a cycle through a strict edge iff, for some member a: another member is known
    strictly above or below it (a tie with a strict edge), or a key outside the set is known
    >= a (then a > b >= a).  A new cycle leaves the set only by a new strict edge and comes back
    by old edges, so these two cases are all."""
    if b_inside:
        return b in gt.get(a, ()) or a in gt.get(b, ())
    return a in ge.get(b, ())


def _check_leaf(ev, leaf, facts, where):
    if not isinstance(leaf, list) or not leaf:
        raise Malformed(where + ": expected a non-empty list of [point, class, coefficient]")
    total = {}
    labels = {}
    positive = False
    for k, entry in enumerate(leaf):
        w = where + "[" + str(k) + "]"
        if not isinstance(entry, list) or len(entry) != 3:
            raise Malformed(w + ": expected [point, class, coefficient]")
        p, c, v = entry
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < len(ev.points):
            raise Malformed(w + ": point out of range")
        if not isinstance(c, str):
            raise Malformed(w + ": class must be a string")
        mu = _frac(v, w)
        if mu < 0:
            raise Invalid(w + ": negative coefficient")
        if c == ev.points[p][1]:
            raise Invalid(w + ": coefficient on the point's own label")
        if c not in ev.labels:
            # the contradiction compares the label's logit with class c's: c must be a class the
            # model has, so it must be the label of a listed point
            raise Invalid(w + ": class " + repr(c) + " is not the label of any listed point")
        if mu == 0:
            continue
        positive = True
        if p not in labels:
            rep = ev.final(facts, p)
            if is_need(rep):
                raise Invalid(w + ": point " + str(p) + "'s last representation is not determined by the facts on the path")
            labels[p] = vector(rep, ev.memo)
        y = ev.points[p][1]
        for coord, val in labels[p].items():
            for cls, sign in ((y, 1), (c, -1)):
                key = (cls, coord)
                total[key] = total.get(key, 0) + sign * mu * val
    if not positive:
        raise Invalid(where + ": all coefficients are zero")
    for key, val in total.items():
        if val != 0:
            raise Invalid(where + ": class " + repr(key[0]) + ", coordinate " + repr(key[1]) + " sums to " + str(val) + ", not 0")


def classify(obj):
    """("valid" | "invalid" | "malformed", message)."""
    try:
        version, layers, heads, causal, points, tree = parse(obj)
        if version == 3:
            atoms, lemmas, steps = check_clausal.check_proof(points, layers, heads, causal, tree)
        else:
            ev = Evaluator(points, layers, heads, causal, exact=version >= 2)
            nodes, leaves = check_tree(ev, tree)
    except Malformed as exc:
        return "malformed", "malformed: " + str(exc)
    except Invalid as exc:
        return "invalid", "invalid: " + str(exc)
    except RecursionError:
        return "malformed", "malformed: nested too deeply"
    shape = (str(layers) + " layer" + ("s" if layers > 1 else "") + " of " + str(heads) + " average-hard head"
             + ("s" if heads > 1 else "") + (", causal" if causal else ""))
    if version >= 2:  # the exact class B(L, H)
        claim = ("no hardmax attention-only transformer with " + shape + " (one-hot token and position inputs, "
                 "bilinear scores, linear values and read-out, any width and weights) classifies all of them correctly")
    else:
        claim = "no model of R(" + str(layers) + ", " + str(heads) + ") (" + shape + ") classifies all of them correctly"
    if version == 3:
        return "valid", ("valid: version 3, " + str(len(points)) + " points, a clausal proof of " + str(atoms)
                         + " atoms, " + str(lemmas) + " Farkas lemmas, " + str(steps) + " steps; " + claim)
    return "valid", ("valid: version " + str(version) + ", " + str(len(points)) + " points, " + str(nodes)
                     + " nodes, " + str(leaves) + " Farkas leaves; " + claim)


def check(obj):
    status, msg = classify(obj)
    return status == "valid", msg


def main(argv=None):
    try:
        argv = sys.argv[1:] if argv is None else argv
        if len(argv) != 1:
            print("usage: check_depth.py FILE", file=sys.stderr)
            return 2
        try:
            with open(argv[0], encoding="utf-8") as fh:
                obj = json.load(fh)
        except (OSError, UnicodeDecodeError) as exc:
            print("error: cannot read " + argv[0] + ": " + str(getattr(exc, "strerror", None) or exc), file=sys.stderr)
            return 2
        except (ValueError, RecursionError) as exc:
            print("error: " + argv[0] + " is not JSON: " + str(exc).splitlines()[0], file=sys.stderr)
            return 2
        status, msg = classify(obj)
        if status == "malformed":
            print("error: " + msg, file=sys.stderr)
            return 2
        print(msg)
        return 0 if status == "valid" else 1
    except Exception as exc:  # noqa: BLE001
        print("internal error: " + type(exc).__name__ + ": " + str(exc)[:300] + "; please report", file=sys.stderr)
        return 4


if __name__ == "__main__":
    sys.exit(main())
