"""Choosing one expansion per sdfg_scan node, and the compiler flags a reproducibility class needs.

``select_expansions(sdfg, target, reproducibility)`` is the only chooser: it walks every sdfg_scan
node (nested SDFGs included) and asks :func:`sdfg_scan.choice.choose` for the cheapest eligible
expansion (an autotuned winner from the cache when there is one), or checks a pinned one
(:func:`sdfg_scan.choice.check_pin`: a pin below the floor is an error naming the node, the
implementation and the floor). The node keeps its implementation and the one-line reason; nothing
is expanded, so the SDFG can be saved, viewed and reselected for another target.

The reproducibility contract (README, "Reproducibility and compiler flags"): ``exact`` means the
whole program is compiled IEEE-strict (:func:`compile_flags`): no FMA contraction, no reciprocal
math, signed zeros; on GPUs no fused multiply-add and IEEE division and square root. "Bitwise" in
every test compares against the original program compiled with the same flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dace

from sdfg_scan.choice import Choice, check_pin, choose
from sdfg_scan.context import GPU_SCHEDULES, GPU_STORAGE, REPRODUCIBILITY, TARGETS
from sdfg_scan.expansions.environments import FLAGS_CUDA, STRICT_HOST_FLAGS, ExactArithmetic
from sdfg_scan.nodes.base import ColumnNode

FLAGS_HOST = list(STRICT_HOST_FLAGS)


def compile_flags(reproducibility: str = "exact", target: str = "cpu") -> list[str]:
    """The compiler flags a class needs for the whole program: host (``target="cpu"``) or nvcc (``"gpu"``).

    ``exact``: ``-ffp-contract=off -fno-reciprocal-math -fsigned-zeros -fno-fast-math -fno-math-errno
    -fno-trapping-math`` (appended after
    DaCe's defaults, so they win) / ``--fmad=false -prec-div=true -prec-sqrt=true``; ``replay`` and
    ``approx``: none (the class pins nothing; a chosen ``exact`` expansion still brings its flags, see
    :func:`build_flags`). Build an original SDFG the same way to compare::

        dace.Config.set("compiler", "cpu", "args", value=dace.Config.get("compiler", "cpu", "args")
                        + " " + " ".join(sdfg_scan.compile_flags("exact")))
    """
    if reproducibility not in REPRODUCIBILITY:
        raise ValueError(f"sdfg_scan.compile_flags: reproducibility must be one of {REPRODUCIBILITY}, "
                         f"got '{reproducibility}'")
    if target not in TARGETS:
        raise ValueError(f"sdfg_scan.compile_flags: target must be one of {TARGETS}, got '{target}'")
    if reproducibility != "exact":
        return []
    return list(FLAGS_HOST if target == "cpu" else FLAGS_CUDA)


def pin_flags(sdfg: dace.SDFG, reproducibility: str) -> list[str]:
    """Make the build of ``sdfg`` follow ``reproducibility``'s flags (:func:`compile_flags`); returns them.

    ``exact``: every code node of the top-level states requires :class:`ExactArithmetic`, whose flags
    DaCe appends to the build of the whole program (host) and to ``CMAKE_CUDA_FLAGS`` (device),
    whether or not an sdfg_scan node is left. Other classes change nothing.
    """
    if reproducibility != "exact":
        return []
    env = ExactArithmetic.full_class_path()  # type: ignore[attr-defined]  # added by @dace.library.environment
    for state in sdfg.states():
        for n in state.nodes():
            if isinstance(n, dace.nodes.CodeNode) and not isinstance(n, dace.nodes.LibraryNode):
                n.environments = set(n.environments) | {env}
    return compile_flags("exact", "cpu") + compile_flags("exact", "gpu")


@dataclass
class BuildFlags:
    """The compiler flags DaCe's build of an SDFG takes from library environments (:func:`build_flags`).

    DaCe appends every used environment's ``cmake_compile_flags`` to the host build of the whole
    program, and its ``CMAKE_CUDA_FLAGS`` to the CUDA build (which exists only where the program has
    CUDA code), whichever node brought the environment.

    :param host: host compiler flags, in the order the environments list them.
    :param cuda: nvcc flags (empty when the program has no CUDA code).
    :param sources: environment (class name) -> what brings it: ``"the program's code nodes"`` (e.g.
        :func:`pin_flags`) or ``"<kind> '<name>' (<implementation>)"`` for a library node's chosen expansion.
    """

    host: list[str] = field(default_factory=list)
    cuda: list[str] = field(default_factory=list)
    sources: dict[str, list[str]] = field(default_factory=dict)

    @property
    def flags(self) -> list[str]:
        return self.host + self.cuda


def _value(attribute):
    """An environment attribute: a value, or a function that computes it when the program is built."""
    return attribute() if callable(attribute) else attribute


def _has_cuda_code(sdfg: dace.SDFG) -> bool:
    """Whether DaCe generates CUDA code for ``sdfg``: a GPU schedule or GPU storage anywhere in it."""
    for node, _ in sdfg.all_nodes_recursive():
        if getattr(node, "schedule", None) in GPU_SCHEDULES:
            return True
        if isinstance(node, dace.nodes.MapEntry) and node.map.schedule in GPU_SCHEDULES:
            return True
    return any(desc.storage in GPU_STORAGE for sd in sdfg.all_sdfgs_recursive() for desc in sd.arrays.values())


def _node_environments(node) -> list[str]:
    """The environments (full class paths) a node brings to the build: its own and, for a library node
    not yet expanded, those of its chosen expansion."""
    envs = list(getattr(node, "environments", None) or ())
    if isinstance(node, dace.nodes.LibraryNode):
        impl = node.implementation if node.implementation not in (None, "auto") else node.default_implementation
        expansion = type(node).implementations.get(impl) if impl else None
        envs += [e.full_class_path() for e in getattr(expansion, "environments", ())]
    return envs


def build_flags(sdfg: dace.SDFG) -> BuildFlags:
    """The flags the build of ``sdfg`` gets from the environments of its code nodes and of the chosen
    expansions of its library nodes (nothing needs to be expanded; dependencies included)."""
    envs: dict[str, list[str]] = {}
    for node, _ in sdfg.all_nodes_recursive():
        if not isinstance(node, dace.nodes.CodeNode):
            continue
        own = set(getattr(node, "environments", None) or ())
        for env in _node_environments(node):
            if isinstance(node, dace.nodes.LibraryNode) and env not in own:
                who = f"{type(node).__name__} '{getattr(node, 'name', node.label)}' ({node.implementation})"
            else:
                who = "the program's code nodes"
            if who not in envs.setdefault(env, []):
                envs[env].append(who)
    out = BuildFlags()
    cuda = _has_cuda_code(sdfg)
    for env in dace.library.get_environments_and_dependencies(set(envs)):
        mine = " ".join(_value(env.cmake_compile_flags)).split()
        host = [f for f in mine if f not in out.host]
        variable = str(_value(env.cmake_variables).get("CMAKE_CUDA_FLAGS", ""))
        device = [f for f in variable.replace("${CMAKE_CUDA_FLAGS}", "").split() if f not in out.cuda] if cuda else []
        out.host += host
        out.cuda += device
        if mine or device:   # named even where another environment brings the same flags (replay's IEEE ones)
            out.sources[env.__name__] = envs.get(env.full_class_path(), ["a dependency"])
    return out


def select_expansions(sdfg: dace.SDFG, target: str | None = None, reproducibility: str = "exact",
                      keep_explicit: bool = True, symbols: dict | None = None) -> list[Choice]:
    """Choose the implementation of every sdfg_scan node; one :class:`~sdfg_scan.choice.Choice` per node.

    :param target: ``"cpu"`` or ``"gpu"``: where the nodes must run (an error names a node that runs
        elsewhere); None: where each node runs (its schedule and storage).
    :param reproducibility: the weakest class allowed (``exact``, ``replay`` or ``approx``); a node's own
        ``reproducibility`` property can only make its floor stronger.
    :param keep_explicit: keep implementations a user pinned (anything but ``auto`` and earlier
        selections), after checking them against the floor and the target.
    :param symbols: sizes to assume for symbols in the cost model (default: typical icon4py sizes).
    """
    if reproducibility not in REPRODUCIBILITY:
        raise ValueError(f"sdfg_scan.select_expansions: reproducibility must be one of {REPRODUCIBILITY}, "
                         f"got '{reproducibility}'")
    if target is not None and target not in TARGETS:
        raise ValueError(f"sdfg_scan.select_expansions: target must be one of {TARGETS} or None, got '{target}'")
    choices = []
    for node, state in sdfg.all_nodes_recursive():
        if not isinstance(node, ColumnNode):
            continue
        pinned = node.implementation not in (None, "auto", node.selected)
        if keep_explicit and pinned:
            choice = check_pin(node, state, node.implementation, target, reproducibility)
        else:
            choice = choose(node, state, target, reproducibility, symbols)
            node.implementation = node.selected = choice.implementation
        node.selection_reason = choice.reason
        choices.append(choice)
    return choices


def exact_cuda_flags() -> None:
    """Append the nvcc flags ``exact`` GPU expansions need (no FMA contraction, IEEE division and sqrt)
    to DaCe's ``compiler.cuda.args`` for this process (idempotent). ``optimize`` does not need it: the
    ``ExactArithmetic`` environment passes them to the CUDA build of an exact program."""
    args = dace.Config.get("compiler", "cuda", "args").split()
    dace.Config.set("compiler", "cuda", "args", value=" ".join(args + [f for f in FLAGS_CUDA if f not in args]))


__all__ = ["BuildFlags", "Choice", "build_flags", "compile_flags", "exact_cuda_flags", "pin_flags", "select_expansions"]
