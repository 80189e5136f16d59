"""Measuring a model against its source: STS retention, latency, size, retrieval, the gate.

* :mod:`.embedders` opens any model spec (PyTorch / sentence-transformers folder,
  Hub id, alias, ONNX export folder) behind one ``Embedder`` interface;
* :mod:`.sts`, :mod:`.latency`, :mod:`.size`, :mod:`.retrieval` measure one thing each;
* :mod:`.report` holds the result (JSON, rich tables, Markdown) and the gate;
* :mod:`.runner` is the ``verify`` API that ties them together.
"""
