"""``export``: a self-contained ONNX graph (pooling, head and normalisation inside), int8 / fp16
variants, graph optimisation, validation against PyTorch, and the safetensors folder.

* :mod:`.export_settings` - what to write (:class:`.export_settings.ExportSettings`)
* :mod:`.graph`    - the torch wrapper and ``torch.onnx.export``
* :mod:`.export_folder` - file names, outputs and the files beside the graphs: one folder every runtime loads
* :mod:`.quantize` - int8 (SmoothQuant + per-token activations) and fp16
* :mod:`.optimize` - onnxruntime graph optimisation levels O1-O3
* :mod:`.validate` - parity of every written file with the PyTorch model
* :mod:`.vectors` - nested widths (``--dims``) and the output vectors' int8 ranges per width
* :mod:`.export` - ``export()``: checkpoint -> folder, atomically
"""
