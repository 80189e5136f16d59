"""The torch-free runtime of an export folder: :class:`OnnxEncoder` (onnxruntime, or an OpenVINO file through
:mod:`.openvino_session`), with tokenizers and numpy only. This package is what an edge deployment ships."""

from espresso_export.runtime.onnx_encoder import (
    EMBEDDING_OUTPUT,
    EXPORT_FILE,
    FIXED_WIDTHS,
    LEGACY_TOKEN_OUTPUT,
    TOKEN_OUTPUT,
    TOKENIZER_FILE,
    ExportFolderError,
    OnnxEncoder,
    graph_bytes,
    is_export_folder,
    read_export_info,
)

__all__ = [
    "EMBEDDING_OUTPUT", "EXPORT_FILE", "FIXED_WIDTHS", "LEGACY_TOKEN_OUTPUT", "TOKEN_OUTPUT", "TOKENIZER_FILE",
    "ExportFolderError", "OnnxEncoder", "graph_bytes", "is_export_folder", "read_export_info",
]
