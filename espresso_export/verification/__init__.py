"""Measuring a model against its source: STS retention, latency, size, retrieval, the gate.

* :mod:`.embedders` opens any model spec (PyTorch / sentence-transformers folder,
  Hub id, alias, ONNX export folder) behind one ``Embedder`` interface;
* :mod:`.sts`, :mod:`.latency`, :mod:`.retrieval` measure one thing each; :mod:`.corpus_agreement` the
  agreement with the source's ranking on the user's documents (:mod:`.agreement` scores it);
  :mod:`.vectors` and :mod:`.vector_measures` the candidate's vectors at other precisions and widths;
* :mod:`.report` holds the result (JSON, rich tables, Markdown; :mod:`.vectors_report` the corpus, precision and width tables),
  :mod:`.gate` its checks;
* :mod:`.verify` is the ``verify`` API that ties them together, :mod:`.verify_settings` its settings.
"""
