"""The label of a point computed from the task's definition, in plain Python, apart from the
enumerators (checkers/tasks/*: their vectorized `decode`).

A rule takes the point's tokens (strings, in order) and returns its label (a class name), or
raises `RuleViolation` naming why the tokens are not a point of the task (a malformed
sequence).  It reads the task's parameters and token groups only, never its `decode`, so an
enumerator that returns a wrong label (or a changed labelling) disagrees with the rule.

    icqa      q_0 = a_0 ... q_{k-1} = a_{k-1} q_c =  (distinct questions, distinct answers):
              the answer after the query's question
    multihop  x_0 > f(x_0) ... x_{k-1} > f(x_{k-1}) s >  (distinct sources, targets among them):
              f^hops(s)
    tm        l tokens of the alphabet, then <cls>: the template (first-occurrence pattern)
    ictm      X_0 = a_0 ... X_{k-1} = a_{k-1} X =  (distinct templates, distinct answers): the
              answer of the context question with the query's template ("new": X is not it)
    parity, mod-count
              tokens 0/1: the number of 1s mod p

Used by checkers/symmetry.check_orbits (every orbit representative's label is recomputed here).
"""
from __future__ import annotations

from typing import Callable, Sequence

RESPONSE = "="
RELATION = ">"
CLS = "<cls>"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class RuleViolation(Exception):
    """The tokens are not a point of the task (the message says which condition fails)."""


def template_of(tokens: Sequence[str]) -> tuple[int, ...]:
    """The first-occurrence pattern: the j-th distinct token becomes j."""
    seen: dict[str, int] = {}
    return tuple([seen.setdefault(t, len(seen)) for t in tokens])


def template_name(pattern: Sequence[int]) -> str:
    """'AAB' for (0, 0, 1); dotted numbers when a pattern has more than 26 wildcards."""
    if len(pattern) and max(pattern) < len(LETTERS):
        return "".join([LETTERS[v] for v in pattern])
    return ".".join(str(v) for v in pattern)


# The rules test each condition with `if not ...: raise RuleViolation(...)`: a message is only
# written for a point that fails (the rules run once per orbit representative).


def icqa_label(k: int, questions: Sequence[str], answers: Sequence[str]) -> Callable[[Sequence[str]], str]:
    qs, ans = set(questions), set(answers)

    def rule(tokens):
        if not len(tokens) == 3 * k + 2:
            raise RuleViolation(f"length {len(tokens)}, not 3k + 2 = {3 * k + 2}")
        triples = [tuple(tokens[3 * t: 3 * t + 3]) for t in range(k)]
        for q, eq, a in triples:
            if not (q in qs and eq == RESPONSE and a in ans):
                raise RuleViolation(f"{q} {eq} {a} is not a (question, =, answer) triple")
        if not len({q for q, _, _ in triples}) == k:
            raise RuleViolation("a question occurs twice")
        if not len({a for _, _, a in triples}) == k:
            raise RuleViolation("an answer occurs twice")
        if not tokens[3 * k + 1] == RESPONSE:
            raise RuleViolation("the sequence does not end with =")
        hits = [a for q, _, a in triples if q == tokens[3 * k]]
        if not len(hits) == 1:
            raise RuleViolation(f"the query {tokens[3 * k]} is not one of the context questions")
        return hits[0]

    return rule


def function_power_at(f: dict, start: str, hops: int) -> str:
    """f^hops(start) for a map f on finitely many entities: walk until an entity repeats, then
    reduce hops modulo the cycle (hops may be astronomically large)."""
    path, where = [start], {start: 0}
    while len(path) <= hops:
        nxt = f[path[-1]]
        if nxt in where:
            mu = where[nxt]
            return path[mu + (hops - mu) % (len(path) - mu)]
        where[nxt] = len(path)
        path.append(nxt)
    return path[hops]


def multihop_label(k: int, hops: int, entities: Sequence[str]) -> Callable[[Sequence[str]], str]:
    ents = set(entities)

    def rule(tokens):
        if not len(tokens) == 3 * k + 2:
            raise RuleViolation(f"length {len(tokens)}, not 3k + 2 = {3 * k + 2}")
        pairs = [(tokens[3 * i], tokens[3 * i + 1], tokens[3 * i + 2]) for i in range(k)]
        if not all(x in ents and r == RELATION for x, r, _ in pairs):
            raise RuleViolation("a pair is not (entity, >, entity)")
        f = {x: y for x, _, y in pairs}
        if not len(f) == k:
            raise RuleViolation("a source occurs twice")
        if not all(y in f for _, _, y in pairs):
            raise RuleViolation("a target is not one of the sources")
        if not (tokens[3 * k] in f and tokens[3 * k + 1] == RELATION):
            raise RuleViolation("the query is not (source, >)")
        return function_power_at(f, tokens[3 * k], hops)

    return rule


def tm_label(l: int, alphabet: Sequence[str]) -> Callable[[Sequence[str]], str]:
    alpha = set(alphabet)

    def rule(tokens):
        if not (len(tokens) == l + 1 and tokens[l] == CLS):
            raise RuleViolation(f"not l = {l} tokens followed by {CLS}")
        word = tokens[:l]
        if not alpha.issuperset(word):
            raise RuleViolation("a token outside the alphabet")
        return template_name(template_of(word))

    return rule


def ictm_label(k: int, l: int, alphabet: Sequence[str], answers: Sequence[str], query: str
               ) -> Callable[[Sequence[str]], str]:
    alpha, ans = set(alphabet), set(answers)
    block = l + 2

    def rule(tokens):
        if not len(tokens) == k * block + l + 1:
            raise RuleViolation(f"length {len(tokens)}, not k(l+2)+l+1 = {k * block + l + 1}")
        ctx = [tuple(tokens[i * block: i * block + l]) for i in range(k)]
        outs = [tokens[i * block + l + 1] for i in range(k)]
        if not (all(tokens[i * block + l] == RESPONSE for i in range(k)) and tokens[-1] == RESPONSE):
            raise RuleViolation("an = is missing")
        if not all(t in alpha for x in ctx for t in x):
            raise RuleViolation("a context token outside the alphabet")
        if not (all(a in ans for a in outs) and len(set(outs)) == k):
            raise RuleViolation("the answers are not k distinct answer tokens")
        temps = [template_of(x) for x in ctx]
        if not len(set(temps)) == k:
            raise RuleViolation("two context questions have the same template")
        q = tuple(tokens[k * block: k * block + l])
        if not all(t in alpha for t in q):
            raise RuleViolation("a query token outside the alphabet")
        hits = [i for i in range(k) if temps[i] == template_of(q)]
        if not len(hits) == 1:
            raise RuleViolation("the query's template is not one of the context templates")
        if not (query != "new" or q != ctx[hits[0]]):
            raise RuleViolation("the query repeats its context question (query new)")
        return outs[hits[0]]

    return rule


def count_label(p: int) -> Callable[[Sequence[str]], str]:
    def rule(tokens):
        if not all(t in ("0", "1") for t in tokens):
            raise RuleViolation("a token other than 0 and 1")
        return str(sum(t == "1" for t in tokens) % p)

    return rule


def rule_for(task) -> Callable[[Sequence[str]], str] | None:
    """The label rule of a task of the paper's families, from its parameters and token groups;
    None for a task whose labels are its data (a dataset file, a tracr program's outputs)."""
    from depthcert.checkers.tasks.icqa import ICQA
    from depthcert.checkers.tasks.logdepth import ModCount, Parity
    from depthcert.checkers.tasks.multihop import MultiHop
    from depthcert.checkers.tasks.template import InContextTemplateMatching, TemplateMatching

    families = (ICQA, MultiHop, TemplateMatching, InContextTemplateMatching, Parity, ModCount)
    if not isinstance(task, families):  # a dataset file or a tracr program named like a family: its labels are data
        return None
    name, prm = task.name, task.params
    if name == "icqa":
        return icqa_label(prm["k"], task.questions, task.answers)
    if name == "multihop":
        return multihop_label(prm["k"], prm["hops"], task.entities)
    if name == "tm":
        return tm_label(prm["l"], task.tokens)
    if name == "ictm":
        return ictm_label(prm["k"], prm["l"], task.tokens, task.answers, prm.get("query", "any"))
    if name in ("parity", "mod-count"):
        return count_label(prm.get("modulus", 2))
    return None
