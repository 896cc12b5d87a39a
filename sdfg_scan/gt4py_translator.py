"""The translation step of ``sdfg_scan.gt4py.make_backend(stage="final")``: gt4py's own ``DaCeTranslator``,
whose SDFG then goes through :class:`sdfg_scan.gt4py_stages.FinalStage` before gt4py serialises and compiles it.

A module of its own because it imports gt4py at import time (the class must be importable by name: gt4py
may pickle its workflow steps), and ``sdfg_scan.gt4py`` imports gt4py only when a backend is built."""

from __future__ import annotations

import dataclasses
from typing import Any

import dace
from gt4py.next.program_processors.runners.dace.workflow import common as gtx_wfdcommon
from gt4py.next.program_processors.runners.dace.workflow import factory as gtx_factory
from gt4py.next.program_processors.runners.dace.workflow.translation import DaCeTranslator

from sdfg_scan.gt4py_stages import FinalStage


@dataclasses.dataclass(frozen=True)
class FinalStageTranslator(DaCeTranslator):
    """``DaCeTranslator`` followed by ``final_stage`` on the SDFG it generates (in gt4py's DaCe configuration
    for the device, as gt4py runs its own optimizer)."""

    final_stage: FinalStage | None = None

    def generate_sdfg(self, *args: Any, **kwargs: Any) -> dace.SDFG:
        sdfg = super().generate_sdfg(*args, **kwargs)
        if self.final_stage is not None:
            with gtx_wfdcommon.dace_context(device_type=self.device_type):
                self.final_stage(sdfg)
        return sdfg


def make_final_stage_translator(cfg: gtx_factory.DaCeConfig, /, *, final_stage: FinalStage,
                                **kwargs: Any) -> FinalStageTranslator:
    """gt4py's ``make_dace_translator(cfg, **kwargs)``, as a :class:`FinalStageTranslator` running ``final_stage``."""
    base = gtx_factory.make_dace_translator(cfg, **kwargs)
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init}
    return FinalStageTranslator(**fields, final_stage=final_stage)
