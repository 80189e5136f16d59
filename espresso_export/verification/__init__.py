"""Measuring a model against its source: STS retention, latency, size, retrieval, the gate.

* :mod:`.embedders` opens any model spec (PyTorch / sentence-transformers folder,
  Hub id, alias, ONNX export folder) behind one ``Embedder`` interface;
* :mod:`.sts`, :mod:`.latency`, :mod:`.retrieval` measure one thing each;
* :mod:`.report` holds the result (JSON, rich tables, Markdown), :mod:`.gate` its checks;
* :mod:`.verify` is the ``verify`` API that ties them together, :mod:`.verify_settings` its settings.
"""
