"""Staged ``pow`` for vectorised cell loops: each call site computed only in the lanes that take its branch.

An if-converted cell loop (``VectorizeCellMap``) computes every branch's ``pow`` in every lane and selects the
values the program's branches take afterwards. On graupel's pointwise map that is 29 ``pow`` per point where the
program makes 11.3 on average (README, stop 43): most of the map's time. Here every ``pow`` call site ``s`` of
the loop body (after if-conversion: straight-line code) gets a *depth*, the number of staged ``pow`` values its
arguments and its lane predicate depend on, transitively. The loop over a block of cells is then written as
several loops over the same block::

    pass 0:  the body, every depth-0 site recording (its predicate, x, y) per lane, deeper sites 0.0,
             no store to memory (GCC removes what no record needs)
    then, per depth-0 site: the lanes whose predicate holds packed together, pow on the packed lanes in
             vectors, the results written back to their lanes
    pass 1:  depth-0 sites read their results, depth-1 sites record, ...
    last:    the whole body, every staged site reading its result

``pow`` is computed once per lane that takes its branch (plus the vectors' tails), the rest of the body once
per pass (cheap arithmetic next to ``pow``). The packed ``pow`` is the very function the loop called (the
exact class's checked ``pow`` with glibc's call where it cannot prove glibc's value; replay's accurate
``pow``), on the same arguments, so every value a branch selects is bitwise what the unstaged loop computes;
the lanes that do not take a site's branch never had their value selected.

The body is read as the C++ text :class:`~sdfg_scan.expansions.scan_blocked_codegen.BodyWriter` writes (blocks,
declarations, assignments). Anything else refuses (:func:`stage` returns None and the loop stays as it was):
a plain ``if`` left by a branch that was not if-converted, a statement of another form, a load from memory
after a store to memory (a later pass would read what an earlier one did not store). A site stays inline (as
before) where its arguments are not known to be ``double`` (DaCe's ``pow`` of integers is another function)
or where GCC folds it (a literal exponent of 0, 1, 2 or -1, or a literal base and exponent: the program's
build folds those too, and the staged call would not see the literal).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SITE_FUNCTIONS = {"exact": "_sdfg_scan_xpow", "replay": "_sdfg_scan_spow"}
"""The call of a ``pow`` site, ``f(lane predicate, x, y)``, per class (``BodyWriter(pow_lanes=True)`` writes
``_sdfg_scan_spow`` for replay; the exact form's calls are ``_sdfg_scan_xpow``)."""

CACHED_FUNCTIONS = {"exact": {"_sdfg_scan_xexp": 2, "_sdfg_scan_xlog": 2},
                    "replay": {"_sdfg_scan_vexp": 1, "_sdfg_scan_vlog": 1}}
"""The other math calls of a loop body (name: arguments; the exact ones take the lane predicate first): where
their arguments need no staged value, each is computed once, in pass 0, and read back by the later passes
(a ``pow`` left inline is too), instead of once per pass."""

ENABLED = True
"""Off: vectorised maps compute every site in every lane, as before stop 45 (benchmarks compare the two)."""

MAX_DEPTH = 0
"""Sites deeper than this stay inline (computed in every lane of the last pass): each depth staged costs one
more pass over the body. On graupel's map (25 sites staged, 4 of them at depths 1 and 2) staging all depths
ran within noise of depth 0 (0.1364 s against 0.1372 s under replay)."""

LITERAL_EXPONENTS = True
"""A staged site whose exponent is a literal in every lane packs only its bases and calls a function in which the
exponent is that literal (off: every site through the function of both arguments, as before stop 49)."""

ARRAY_BYTES = 512 * 1024
"""At most this many bytes of per-block arrays (three per staged site, one per cached call, on each thread's
stack); a body that needs more stays one loop."""

_IDENT = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_DECL = re.compile(r"^(?P<type>(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:long\s+long|[A-Za-z_][\w:]*))\s+"
                   r"(?P<name>[A-Za-z_]\w*)\s*(?P<arr>\[[^\]]*\])?\s*(?:=\s*(?P<init>.*))?;$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+(?=[eE]))([eE][+-]?\d+)?$")
"""A floating literal (a ``.`` or an exponent): its double is the value the program's variable held."""
_KEYWORDS = {"if", "else", "for", "while", "do", "return", "switch", "case", "goto", "break", "continue"}
_CALL = re.compile(r"([A-Za-z_][\w:]*)\s*\(([^()]*)\)")


class _Refuse(Exception):
    pass


def _array(pointer: str) -> str:
    """The program's array behind a loop's pointer (``VectorizeCellMap`` reads ``x`` as ``_r_x``, writes it as
    ``_w_x``)."""
    return re.sub(r"^_[rw]_", "", pointer)


@dataclass
class _Site:
    func: str
    depth: int
    staged: bool          # a pow computed packed after the pass of its depth
    cacheable: bool = False   # a call whose double arguments allow its value to be kept from pass 0
    cached: bool = False
    y: str | None = None      # the exponent where it is a floating literal in every lane (a staged pow)


@dataclass
class Staging:
    """A staged loop body: ``passes[p]`` the body of pass ``p`` (the last: the whole body), ``after[p]`` the
    sites whose packed ``pow`` runs after pass ``p``, ``sites`` every staged site (its arrays)."""
    passes: list[list[str]]
    after: list[list[int]]
    sites: list[int] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)
    block: int = 256
    exponents: dict[int, str] = field(default_factory=dict)   # staged site -> its literal exponent


def _split_args(text: str, start: int) -> tuple[list[str], int]:
    """The top-level comma-separated arguments of the call whose ``(`` is at ``start``, and the index after its
    ``)``."""
    depth, args, cur = 0, [], start + 1
    i = start
    while i < len(text):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[cur:i])
                return [a.strip() for a in args], i + 1
        elif ch == "," and depth == 1:
            args.append(text[cur:i])
            cur = i + 1
        i += 1
    raise _Refuse("unbalanced call")


def _strip_parens(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and text.endswith(")"):
        try:
            args, end = _split_args(text, 0)
        except _Refuse:
            return text
        if end != len(text) or len(args) != 1:
            return text
        text = args[0].strip()
    return text


def _assignment(text: str) -> tuple[str, str] | None:
    """``lhs = rhs`` split at its top-level ``=`` (not ``==``, ``<=``, ``>=``, ``!=``)."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "=" and depth == 0:
            prev = text[i - 1] if i else ""
            nxt = text[i + 1] if i + 1 < len(text) else ""
            if prev in "=<>!+-*/%&|^" or nxt == "=":
                if prev in "+-*/%&|^" and nxt != "=":
                    raise _Refuse(f"compound assignment: {text}")
                continue
            return text[:i].strip(), text[i + 1:].strip()
    return None


class _Analyzer:
    def __init__(self, func: str, cached_functions: dict[str, int]):
        self.func = func
        self.cached_functions = cached_functions
        names = sorted([func, *cached_functions], key=len, reverse=True)
        self.pattern = re.compile(r"(?<![\w:.])(" + "|".join(re.escape(n) for n in names) + r")\s*\(")
        # name -> (depth, type, literal, the literal it holds through double variables only)
        self.scopes: list[dict[str, tuple[int, str, str | None, str | None]]] = [{}]
        self.sites: list[_Site] = []
        self.stored: set[str] = set()   # the arrays of memory stored to so far

    def lookup(self, name: str):
        for s in reversed(self.scopes):
            if name in s:
                return s[name]
        return None

    def set(self, name: str, depth: int, ctype: str, literal: str | None, declare: bool,
            dlit: str | None = None) -> None:
        if declare:
            self.scopes[-1][name] = (depth, ctype, literal, dlit)
            return
        for s in reversed(self.scopes):
            if name in s:
                old = s[name]
                s[name] = (depth, old[1], literal, dlit)
                return
        raise _Refuse(f"assignment to '{name}', not declared in the body")

    def literal(self, text: str) -> str | None:
        t = _strip_parens(text)
        if _NUMBER.match(t):
            return t
        if re.fullmatch(r"[A-Za-z_]\w*", t):
            v = self.lookup(t)
            if v is not None:
                return v[2]
        return None

    def double_literal(self, text: str) -> str | None:
        """The floating literal ``text`` is, or the one the ``double`` variable it names was last given through
        ``double`` variables only (a literal stored in an integer on the way would have been truncated)."""
        t = _strip_parens(text)
        if _FLOAT.match(t):
            return t
        if re.fullmatch(r"[A-Za-z_]\w*", t):
            v = self.lookup(t)
            if v is not None and v[1] in ("double", "const double"):
                return v[3]
        return None

    def is_double(self, text: str) -> bool:
        """Every name in ``text`` a ``double`` of the body (or a site's value: the loop's ``pow``/``exp``/``log`` of
        doubles), every number a floating literal, only arithmetic and ``min``/``max`` between them."""
        t = self.sites_as_values(text)
        while True:
            m = _CALL.search(t)
            if m is None:
                break
            if m.group(1) not in ("min", "max") or not all(self.is_double(a) for a in m.group(2).split(",")):
                return False
            t = t[:m.start()] + "0.0" + t[m.end():]
        if re.search(r"[?:<>=!&|%~^\[,]", t):
            return False
        for m in re.finditer(r"(?<![\w.])(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?(?![\w.])", t):
            if "." not in m.group(0) and "e" not in m.group(0).lower():
                return False
        for m in _IDENT.finditer(t):
            v = self.lookup(m.group(0))
            if v is None or v[1] not in ("double", "const double"):
                return False
        return True

    def sites_as_values(self, text: str) -> str:
        """Marked ``text`` with every site a ``double`` value (``0.0``) where its arguments are doubles, else an
        unknown name."""
        out: list[str] = []
        i = 0
        while True:
            j = text.find("\x00", i)
            if j < 0:
                return "".join(out) + text[i:]
            k = text.index("\x00", j + 1)
            _, end = _split_args(text, k + 1)
            out.append(text[i:j] + ("0.0" if self.sites[int(text[j + 1:k])].cacheable else "_not_a_double_"))
            i = end

    def expr(self, text: str) -> tuple[str, int]:
        """``text`` with its sites marked ``\x00id\x00(args)``, and its depth."""
        out: list[str] = []
        i, depth = 0, 0
        while True:
            m = self.pattern.search(text, i)
            if m is None:
                out.append(text[i:])
                break
            out.append(text[i:m.start()])
            func = m.group(1)
            args, end = _split_args(text, m.end() - 1)
            nargs = 3 if func == self.func else self.cached_functions[func]
            if len(args) != nargs:
                raise _Refuse(f"{func} with {len(args)} arguments")
            marked, d = [], 0
            for a in args:
                t, da = self.expr(a)
                marked.append(t)
                d = max(d, da)
            values = marked[-2:] if func == self.func else marked[nargs - 1:]
            doubles = all(self.is_double(v) for v in values)
            staged = False
            if func == self.func:
                lit_x, lit_y = self.literal(args[1]), self.literal(args[2])
                folded = (lit_y is not None and float(lit_y) in (0.0, 1.0, 2.0, -1.0)) or \
                    (lit_x is not None and lit_y is not None)
                staged = not folded and doubles
            sid = len(self.sites)
            self.sites.append(_Site(func, d, staged, cacheable=doubles,
                                    y=self.double_literal(args[2]) if staged else None))
            out.append(f"\x00{sid}\x00({', '.join(marked)})")
            depth = max(depth, d + 1 if staged else d)
            i = end
        text_out = "".join(out)
        return text_out, max(depth, self.names_depth(re.sub(r"\x00\d+\x00", "", text_out)))

    def names_depth(self, text: str) -> int:
        d = 0
        for m in _IDENT.finditer(text):
            name = m.group(0)
            v = self.lookup(name)
            if v is not None:
                d = max(d, v[0])
            elif text[m.end():m.end() + 1] == "[" and _array(name) in self.stored:
                raise _Refuse(f"'{name}' read from memory after a store to it")
        return d

    def line(self, raw: str) -> tuple[str, str | None]:
        """The line with its sites marked, and the value it stores where it stores to memory."""
        text = raw.strip()
        if text in ("{", "}"):
            if text == "{":
                self.scopes.append({})
            else:
                if len(self.scopes) == 1:
                    raise _Refuse("unbalanced block")
                self.scopes.pop()
            return raw, None
        if not text.endswith(";") or text.startswith("#"):
            raise _Refuse(f"statement of another form: {text}")
        first = _IDENT.match(text)
        if first is not None and first.group(0) in _KEYWORDS:
            raise _Refuse(f"control flow in the body: {text}")
        m = _DECL.match(text)
        if m is not None:
            name, ctype = m.group("name"), " ".join(m.group("type").split())
            if m.group("arr"):
                if m.group("init"):
                    raise _Refuse(f"initialised array: {text}")
                self.set(name, 0, ctype + "[]", None, declare=True)
                return raw, None
            init = m.group("init")
            if init is None:
                self.set(name, 0, ctype, None, declare=True)
                return raw, None
            marked, d = self.expr(init)
            if ctype in ("auto", "const auto"):
                ctype = "double" if self.is_double(marked) else ctype
            self.set(name, d, ctype, self.literal(init) if "\x00" not in marked else None, declare=True,
                     dlit=self.double_literal(init) if "\x00" not in marked else None)
            at = raw.rindex(init)
            return raw[:at] + marked + raw[at + len(init):], None
        split = _assignment(text[:-1])
        if split is None:
            raise _Refuse(f"statement of another form: {text}")
        lhs, rhs = split
        marked, d = self.expr(rhs)
        new = raw if marked == rhs else raw[: raw.rindex(rhs)] + marked + raw[raw.rindex(rhs) + len(rhs):]
        if re.fullmatch(r"[A-Za-z_]\w*", lhs):
            self.set(lhs, d, "", self.literal(rhs) if "\x00" not in marked else None, declare=False,
                     dlit=self.double_literal(rhs) if "\x00" not in marked else None)
            return new, None
        base = _IDENT.search(lhs)
        if base is None or not lhs.endswith("]"):
            raise _Refuse(f"store to '{lhs}'")   # (an element of an array is all the writer stores)
        v = self.lookup(base.group(0))
        if v is not None and v[1].endswith("[]"):
            # an element of a local array: its depth is the deepest value ever stored in it
            self.set(base.group(0), max(d, v[0], self.names_depth(lhs)), v[1], None, declare=False)
            return new, None
        if "\x00" in lhs:
            raise _Refuse(f"pow in the address of a store: {lhs}")
        self.names_depth(lhs)
        self.stored.add(_array(base.group(0)))
        return new, marked


def _render(text: str, sites: list[_Site], p: int | None) -> str:
    """Marked text for pass ``p`` (None: the last pass)."""
    out: list[str] = []
    i = 0
    while True:
        j = text.find("\x00", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        k = text.index("\x00", j + 1)
        sid = int(text[j + 1:k])
        args, end = _split_args(text, k + 1)
        s = sites[sid]
        out.append(text[i:j])
        if (s.staged and (p is None or s.depth < p)) or (s.cached and p != 0):
            out.append(f"_pwx{sid}[_l]" if s.staged else f"_pwc{sid}[_l]")   # computed after an earlier pass
        else:
            rargs = [_render(t, sites, p) for t in args]
            if s.cached:
                out.append(f"(_pwc{sid}[_l] = {s.func}({', '.join(rargs)}))")
            elif not s.staged:
                out.append(f"{s.func}({', '.join(rargs)})")
            elif s.depth == p:
                out.append(f"_sdfg_scan_pw_rec(_pwa{sid}[_l], _pwx{sid}[_l], _pwy{sid}[_l], {', '.join(rargs)})")
            else:
                # needed from a later pass: its arguments still evaluated here (the values they keep from
                # pass 0), the rest removed by the compiler
                out.append("(" + "".join(f"(void)({a}), " for a in rargs) + "0.0)")
        i = end


def stage(lines: list[str], cls: str, block: int) -> Staging | None:
    """The passes of a loop body (module docstring), or None where it refuses (or stages no site).
    ``cls``: a key of :data:`SITE_FUNCTIONS`; ``block``: cells per block (the arrays' length)."""
    if not ENABLED:
        return None
    an = _Analyzer(SITE_FUNCTIONS[cls], CACHED_FUNCTIONS[cls])
    marked: list[tuple[str, str | None]] = []
    try:
        for ln in lines:
            marked.append(an.line(ln))
        if len(an.scopes) != 1:
            return None
    except (_Refuse, ValueError, IndexError):
        return None
    for s in an.sites:
        s.staged = s.staged and s.depth <= MAX_DEPTH
        s.cached = not s.staged and s.cacheable and s.depth == 0
    staged = [i for i, s in enumerate(an.sites) if s.staged]
    cached = [i for i, s in enumerate(an.sites) if s.cached]
    if not staged or (3 * len(staged) + len(cached)) * block * 8 > ARRAY_BYTES:
        return None
    top = max(an.sites[i].depth for i in staged)
    passes: list[list[str]] = []
    after: list[list[int]] = []
    for p in range(top + 1):
        after.append([i for i in staged if an.sites[i].depth == p])
        if not after[-1] and p:
            passes.append([])
            continue
        # a store to memory: only its value's calls (what pass 0 keeps for later ones), the store left to the last
        passes.append([f"(void)({_render(store, an.sites, p)});" if store is not None else _render(t, an.sites, p)
                       for t, store in marked])
    passes.append([_render(t, an.sites, None) for t, _ in marked])
    return Staging(passes, after, staged, cached, block,
                   {i: y for i in staged if (y := an.sites[i].y) is not None})


def loops(st: Staging, head: list[str], cls: str) -> list[str]:
    """The C++ of a staged block: the site arrays, each pass as a loop (``head``: the ``omp simd`` pragma, the
    ``for`` line and the lines that open its body), the packed ``pow`` after each pass."""
    b = st.block + (-st.block) % 8   # (the packing reads whole vectors of 8)
    out = [f"alignas(64) double _pwa{s}[{b}], _pwx{s}[{b}], _pwy{s}[{b}];" for s in st.sites]
    out += [f"alignas(64) double _pwc{s}[{b}];" for s in st.cached]
    for p, body in enumerate(st.passes):
        if 0 < p < len(st.after) and not st.after[p]:
            continue   # (pass 0 always runs: it keeps the cached calls' values)
        out += head + ["    " + ln for ln in body] + ["}"]
        if p < len(st.after):
            out += [_packed_call(st, s, cls) for s in st.after[p]]
    return out


_LITERAL_CALLS = {"exact": "SDFG_SCAN_PW_XPOW", "replay": "_sdfg_scan_apow"}


def _packed_call(st: Staging, s: int, cls: str) -> str:
    """The packed ``pow`` of site ``s`` after its pass: with a literal exponent, through a function of the base
    alone in which the exponent is that literal (the compiler folds what depends only on it; the same function
    on the same values, so the same results); otherwise through the function of both arguments."""
    y = st.exponents.get(s)
    if y is None or not LITERAL_EXPONENTS:
        return f"_sdfg_scan_pw_{cls}(_n, _pwa{s}, _pwx{s}, _pwy{s});"
    return (f"_sdfg_scan_pw_eval_y(_n, _pwa{s}, _pwx{s}, [](double _v) __attribute__((always_inline)) "
            f"{{ return {_LITERAL_CALLS[cls]}(_v, {y}); }});")


def support() -> str:
    """``code_global``: the record of a site and the packed ``pow`` of both classes (after the math they call)."""
    return """
#ifndef SDFG_SCAN_STAGED_POW
#define SDFG_SCAN_STAGED_POW
#define SDFG_SCAN_PW_CHUNK 256
// sdfg_scan.expansions.staged_pow: a pow call site of a staged pass records its lane predicate and arguments
__attribute__((always_inline)) static inline double _sdfg_scan_pw_rec(double& ra, double& rx, double& ry, bool a,
                                                                       double x, double y) noexcept {
    ra = a ? 1.0 : 0.0; rx = x; ry = y; return 0.0; }
#if defined(__AVX512F__) && defined(__GNUC__)
#include <immintrin.h>
#define SDFG_SCAN_PW_PACK(n, a, x, y, cx, cy, m) \\
    for (long long l = 0; l < n; l += 8) { \\
        const __mmask8 t = n - l >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - l)) - 1u); \\
        const __mmask8 k = _mm512_mask_cmp_pd_mask(t, _mm512_load_pd(a + l), _mm512_setzero_pd(), _CMP_NEQ_UQ); \\
        _mm512_storeu_pd(cx + m, _mm512_maskz_compress_pd(k, _mm512_load_pd(x + l))); \\
        _mm512_storeu_pd(cy + m, _mm512_maskz_compress_pd(k, _mm512_load_pd(y + l))); \\
        m += __builtin_popcount((unsigned)k); }
#define SDFG_SCAN_PW_UNPACK(n, a, x, cx) \\
    for (long long l = 0, m = 0; l < n; l += 8) { \\
        const __mmask8 t = n - l >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - l)) - 1u); \\
        const __mmask8 k = _mm512_mask_cmp_pd_mask(t, _mm512_load_pd(a + l), _mm512_setzero_pd(), _CMP_NEQ_UQ); \\
        _mm512_store_pd(x + l, _mm512_mask_expand_pd(_mm512_load_pd(x + l), k, _mm512_loadu_pd(cx + m))); \\
        m += __builtin_popcount((unsigned)k); }
#define SDFG_SCAN_PW_PACK1(n, a, x, cx, m) \\
    for (long long l = 0; l < n; l += 8) { \\
        const __mmask8 t = n - l >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - l)) - 1u); \\
        const __mmask8 k = _mm512_mask_cmp_pd_mask(t, _mm512_load_pd(a + l), _mm512_setzero_pd(), _CMP_NEQ_UQ); \\
        _mm512_storeu_pd(cx + m, _mm512_maskz_compress_pd(k, _mm512_load_pd(x + l))); \\
        m += __builtin_popcount((unsigned)k); }
#else
#define SDFG_SCAN_PW_PACK1(n, a, x, cx, m) \\
    for (long long l = 0; l < n; ++l) if (a[l] != 0.0) { cx[m] = x[l]; ++m; }
#define SDFG_SCAN_PW_PACK(n, a, x, y, cx, cy, m) \\
    for (long long l = 0; l < n; ++l) if (a[l] != 0.0) { cx[m] = x[l]; cy[m] = y[l]; ++m; }
#define SDFG_SCAN_PW_UNPACK(n, a, x, cx) \\
    for (long long l = 0, m = 0; l < n; ++l) if (a[l] != 0.0) x[l] = cx[m++];
#endif
// (in chunks of SDFG_SCAN_PW_CHUNK lanes, a multiple of 8: the arrays are 64-byte aligned, any length)
#define SDFG_SCAN_PW_EVAL(name, call) \\
static __attribute__((noinline)) void name(long long n, const double* a, double* x, const double* y) noexcept { \\
    alignas(64) double cx[SDFG_SCAN_PW_CHUNK + 8], cy[SDFG_SCAN_PW_CHUNK + 8]; \\
    for (long long c = 0; c < n; c += SDFG_SCAN_PW_CHUNK) { \\
        const long long nc = n - c < SDFG_SCAN_PW_CHUNK ? n - c : SDFG_SCAN_PW_CHUNK; \\
        long long m = 0; \\
        SDFG_SCAN_PW_PACK(nc, (a + c), (x + c), (y + c), cx, cy, m) \\
        _Pragma("omp simd") \\
        for (long long j = 0; j < m; ++j) cx[j] = call(cx[j], cy[j]); \\
        SDFG_SCAN_PW_UNPACK(nc, (a + c), (x + c), cx) } }
// a site whose exponent is a literal: only the bases packed, f the pow of one base with that exponent
template <typename F>
static __attribute__((noinline)) void _sdfg_scan_pw_eval_y(long long n, const double* a, double* x, F f) noexcept {
    alignas(64) double cx[SDFG_SCAN_PW_CHUNK + 8];
    for (long long c = 0; c < n; c += SDFG_SCAN_PW_CHUNK) {
        const long long nc = n - c < SDFG_SCAN_PW_CHUNK ? n - c : SDFG_SCAN_PW_CHUNK;
        long long m = 0;
        SDFG_SCAN_PW_PACK1(nc, (a + c), (x + c), cx, m)
        _Pragma("omp simd")
        for (long long j = 0; j < m; ++j) cx[j] = f(cx[j]);
        SDFG_SCAN_PW_UNPACK(nc, (a + c), (x + c), cx) } }
#endif
#if defined(SDFG_SCAN_SCALAR_LANE_MATH) && !defined(SDFG_SCAN_PW_EXACT)
#define SDFG_SCAN_PW_EXACT
#define SDFG_SCAN_PW_XPOW(x, y) _sdfg_scan_xpow(true, x, y)
SDFG_SCAN_PW_EVAL(_sdfg_scan_pw_exact, SDFG_SCAN_PW_XPOW)
#endif
#if defined(SDFG_SCAN_ACCURATE_POW_CALL) && !defined(SDFG_SCAN_PW_REPLAY)
#define SDFG_SCAN_PW_REPLAY
// replay's site call outside a staged loop: the accurate pow inline, as before staging
__attribute__((always_inline)) static inline double _sdfg_scan_spow(bool, double x, double y) noexcept {
    return _sdfg_scan_apow(x, y); }
template <typename A, typename B> static inline auto _sdfg_scan_spow(bool, A x, B y) { return _sdfg_scan_apow(x, y); }
SDFG_SCAN_PW_EVAL(_sdfg_scan_pw_replay, _sdfg_scan_apow)
#endif
"""


__all__ = ["ENABLED", "SITE_FUNCTIONS", "Staging", "loops", "stage", "support"]
