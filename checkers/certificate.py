"""Independent checker for one-layer impossibility certificates (paper Def. 3, Props. 7-8, 10).

This file is the whole trust base of every "no one-layer transformer fits this data" claim the
project prints.  It uses the Python standard library only and imports nothing from the project,
so it can be read and audited on its own (docs/impossibility.md has the proof it implements).

Certificate (JSON):

    {"format": "depthcert.certificate", "version": 1,
     "points": [{"tokens": [tok, ...], "label": lab, "mu": {"other class": k, ...}}, ...],
     ... optional informational fields ("task", "classes", "claims", ...) ...}

tokens are strings or ints (the int 1 and the string "1" are different tokens); labels are all
strings or all ints; a key of "mu" names a class (for int labels: the class's decimal digits).
Every coefficient is a non-negative int, at least one is positive, and no point puts a
coefficient on its own label.  Omitted classes have coefficient 0.

Validity.  With w_i = (sum_c mu[i][c]) e_{y_i} - sum_c mu[i][c] e_c, for every group g of points
sharing (length, last token), every position j, token v and class c:

        sum_{i in g, x_ij = v}  w_i[c]  =  0.

Why that is exactly what soundness needs: inside one group a one-layer attention-only model's
last-position logits are o_i = sum_j phi_g(j, x_ij) (the query h_{n-1} = e_last + p_{n-1} is the
same for the whole group, so each key position contributes a term that depends only on (j, x_ij);
the residual is absorbed into phi_g(n-1, last)).  If the model classified every listed point
correctly, each o_i[y_i] - o_i[c] > 0, so

    0 < sum_i sum_c mu[i][c] (o_i[y_i] - o_i[c]) = sum_i w_i . o_i
      = sum_g sum_{j,v} phi_g(j, v) . (sum_{i in g, x_ij = v} w_i) = 0,

a contradiction.  Different groups have unrelated tables phi_g, so the equations must hold per
group; requiring them only summed over groups would be unsound.  (For one-head softmax attention
multiply point i by its normaliser Z_i > 0: Z_i o_i is again additive over positions.)

Use: `check_certificate(obj) -> (ok, message)`, or `python certificate.py FILE` (exit 0 valid,
1 invalid, 2 malformed).
"""
import json
import re
import sys
from collections import OrderedDict

FORMAT = "depthcert.certificate"
VERSION = 1

_INT_KEY = re.compile(r"-?(0|[1-9][0-9]*)")  # canonical decimal, matched whole (no "02", "-0", "2\n")


class MalformedCertificate(ValueError):
    """The object is not a well-formed certificate; the message names the bad field."""


def _token_key(tok, where):
    # bool is a subclass of int in Python, JSON true/false are not tokens
    if isinstance(tok, bool) or not isinstance(tok, (str, int)):
        raise MalformedCertificate(where + ": a token must be a string or an int, got " + repr(tok))
    return (type(tok).__name__, tok)


def _show(tok):
    return json.dumps(tok)


def parse_certificate(obj):
    """Validate the structure; return (points, classes) with points = [(tokens, label, {class: k})].

    tokens are tuples of (type, value) keys; labels and classes are canonical strings.
    Raises MalformedCertificate naming the first bad field.
    """
    if not isinstance(obj, dict):
        raise MalformedCertificate("certificate: expected a JSON object")
    if obj.get("format") != FORMAT:
        raise MalformedCertificate("format: expected " + repr(FORMAT) + ", got " + repr(obj.get("format")))
    version = obj.get("version")
    if isinstance(version, bool) or version != VERSION:
        raise MalformedCertificate("version: expected " + str(VERSION) + ", got " + repr(version))
    points = obj.get("points")
    if not isinstance(points, list) or not points:
        raise MalformedCertificate("points: expected a non-empty list")
    label_types = set()
    for i, p in enumerate(points):
        if not isinstance(p, dict):
            raise MalformedCertificate("points[" + str(i) + "]: expected an object")
        lab = p.get("label")
        if isinstance(lab, bool) or not isinstance(lab, (str, int)):
            raise MalformedCertificate("points[" + str(i) + "].label: expected a string or an int, got " + repr(lab))
        label_types.add(type(lab))
    if len(label_types) > 1:
        raise MalformedCertificate("points[*].label: labels mix strings and ints")
    int_labels = label_types == {int}

    def class_of(key, where):
        if not isinstance(key, str):
            raise MalformedCertificate(where + ": class names must be strings")
        if int_labels:
            if not _INT_KEY.fullmatch(key) or key == "-0":
                raise MalformedCertificate(where + ": labels are ints, so a class key must be the label's canonical "
                                           "decimal digits (no sign +, leading zeros or spaces), got " + repr(key))
            return key
        return key

    declared = None
    if "classes" in obj:
        cl = obj["classes"]
        if not isinstance(cl, list) or not all(isinstance(c, (str, int)) and not isinstance(c, bool) for c in cl):
            raise MalformedCertificate("classes: expected a list of strings or ints")
        declared = set(str(c) for c in cl)

    out = []
    classes = OrderedDict()
    any_positive = False
    for i, p in enumerate(points):
        where = "points[" + str(i) + "]"
        unknown = sorted(set(p) - {"tokens", "label", "mu", "name", "coefficient", "index"})
        if unknown:
            raise MalformedCertificate(where + ": unknown field " + repr(unknown[0]))
        toks = p.get("tokens")
        if not isinstance(toks, list) or not toks:
            raise MalformedCertificate(where + ".tokens: expected a non-empty list")
        tokens = tuple(_token_key(t, where + ".tokens[" + str(j) + "]") for j, t in enumerate(toks))
        label = str(p["label"])
        classes.setdefault(label, None)
        mu = p.get("mu")
        if not isinstance(mu, dict):
            raise MalformedCertificate(where + ".mu: expected an object {class: coefficient}")
        coeffs = OrderedDict()
        for key, k in mu.items():
            c = class_of(key, where + ".mu")
            if isinstance(k, bool) or not isinstance(k, int):
                raise MalformedCertificate(where + ".mu[" + repr(key) + "]: expected a non-negative int, got " + repr(k))
            if k < 0:
                raise MalformedCertificate(where + ".mu[" + repr(key) + "]: negative coefficient " + str(k))
            if c == label:
                raise MalformedCertificate(where + ".mu[" + repr(key) + "]: coefficient on the point's own label")
            if c in coeffs:
                raise MalformedCertificate(where + ".mu: class " + repr(key) + " listed twice")
            classes.setdefault(c, None)
            if k:
                coeffs[c] = k
                any_positive = True
        out.append((tokens, label, coeffs))
    if declared is not None:
        missing = [c for c in classes if c not in declared]
        if missing:
            raise MalformedCertificate("classes: does not list class " + repr(missing[0]))
    if not any_positive:
        raise MalformedCertificate("points[*].mu: all coefficients are zero")
    return out, list(classes)


def check_parsed(points):
    """(ok, message) for parsed points: every per-group occurrence sum must vanish."""
    sums = OrderedDict()
    for tokens, label, coeffs in points:
        total = sum(coeffs.values())
        if not total:
            continue
        w = OrderedDict([(label, total)])
        for c, k in coeffs.items():
            w[c] = w.get(c, 0) - k
        group = (len(tokens), tokens[-1])
        for j, tok in enumerate(tokens):
            for c, val in w.items():
                key = (group, j, tok, c)
                sums[key] = sums.get(key, 0) + val
    for (group, j, tok, c), val in sums.items():
        if val != 0:
            return False, (
                "invalid: group (length " + str(group[0]) + ", last token " + _show(group[1][1]) + "), position "
                + str(j) + ", token " + _show(tok[1]) + ", class " + json.dumps(c)
                + ": the weighted occurrence count is " + str(val) + ", not 0"
            )
    groups = OrderedDict()
    n_pos = 0
    for tokens, label, coeffs in points:
        if coeffs:
            groups[(len(tokens), tokens[-1])] = True
            n_pos += 1
    return True, (
        "valid: " + str(n_pos) + (" point" if n_pos == 1 else " points") + " with positive coefficients in "
        + str(len(groups)) + (" group" if len(groups) == 1 else " groups") + "; no one-layer transformer with entrywise (e.g. ReLU) attention or one softmax head"
        + " classifies all of them correctly"
    )


def classify(obj):
    """("valid" | "invalid" | "malformed", message)."""
    try:
        points, _ = parse_certificate(obj)
    except MalformedCertificate as exc:
        return "malformed", "malformed: " + str(exc)
    ok, msg = check_parsed(points)
    return ("valid" if ok else "invalid"), msg


def check_certificate(obj):
    """(ok, message): ok is True iff obj is a well-formed, valid certificate."""
    status, msg = classify(obj)
    return status == "valid", msg


def main(argv=None):
    """python certificate.py FILE: exit 0 valid, 1 invalid, 2 malformed or unreadable, 4 internal
    error (a bug here: one line, never exit 1, which means invalid)."""
    try:
        return _main(argv)
    except Exception as exc:  # noqa: BLE001
        text = str(exc).strip().splitlines()
        print(f"internal error: {type(exc).__name__}" + (f": {text[0][:300]}" if text else "") + "; please report",
              file=sys.stderr)
        return 4


def _main(argv):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: certificate.py FILE", file=sys.stderr)
        return 2
    if hasattr(sys, "set_int_max_str_digits"):  # as the console command: big coefficients are numbers
        sys.set_int_max_str_digits(0)
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


if __name__ == "__main__":
    sys.exit(main())
