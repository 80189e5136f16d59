"""The small search ``auto``'s tests run on the tiny models: a sample of 80 documents and 24 queries, 400 healing
texts at most, one thread, float32 scores (the same on a CPU with bf16 and one without), the final check timing
its 3 rounds per batch size and no more (``latency_budget``: the tests read what the timing says, not how fast)."""

SMALL_SEARCH = {"sample_documents": 80, "sample_queries": 24, "max_texts": 400, "batch_size": 16, "threads": 1,
                "known_items": "title", "max_noise": 10.0, "amp": "off", "latency_budget": 0.0}
# the same on the command line
SMALL_SEARCH_CLI = ["--sample-documents", "80", "--sample-queries", "24", "--max-texts", "400", "--batch-size", "16",
                    "--threads", "1", "--known-items", "title", "--max-noise", "10", "--amp", "off",
                    "--latency-budget", "0"]
