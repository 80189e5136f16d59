"""onnxruntime graph optimisation, written to disk so every run starts from the optimised graph.

====  =====================================================================
O1    onnxruntime's basic, hardware-independent rewrites (constant folding,
      redundant node elimination)
O2    + onnxruntime.transformers fusions: LayerNormalization, SkipLayerNorm,
      BiasGelu, EmbedLayerNorm, and fused Attention where the pattern matches
      (BERT-style attention; MPNet's relative bias and decoders do not match)
O3    + GELU replaced by its tanh approximation (FastGelu)
====  =====================================================================

For an int8 file the fusions run before quantisation with attention fusion
off, so every projection stays a MatMul the int8 pass can quantise.
"""

from __future__ import annotations

import logging
from pathlib import Path

from espresso_export.core.errors import RuntimeFailure
from espresso_export.core.types import Optimize

log = logging.getLogger(__name__)


def optimize_file(src: Path, dst: Path, level: Optimize, *, external: bool, for_int8: bool = False) -> dict:
    """Write the ``level``-optimised graph of ``src`` to ``dst``; returns the fused-operator counts."""
    if level is Optimize.O1:
        _basic(src, dst, external)
        return {}
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    for name in ("onnxruntime.transformers", "fusion_base", "onnx_model", "onnx_model_bert"):
        logging.getLogger(name).setLevel(logging.ERROR)
    fusion = FusionOptions("bert")
    fusion.enable_attention = not for_int8
    fusion.enable_gelu_approximation = level is Optimize.O3
    try:
        model = optimize_model(str(src), model_type="bert", num_heads=0, hidden_size=0,
                               optimization_options=fusion, opt_level=0)
        model.save_model_to_file(str(dst), use_external_data_format=external)
    except Exception as e:  # the optimiser raises assorted errors on graphs it does not understand
        raise RuntimeFailure(f"graph optimisation {level.value} of {src.name} failed: {e.__class__.__name__}: {e}") from e
    fused = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
    log.info("optimisation %s fused %s", level.value, fused)
    return fused


def _basic(src: Path, dst: Path, external: bool) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(dst)
    options.log_severity_level = 3
    if external:
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", dst.name + ".data")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        raise RuntimeFailure(f"graph optimisation O1 of {src.name} failed: {e}") from e
