"""The known-item queries known-item retention searches with (data/pseudo_queries.py): cut out of their passage,
titles taken off the body, short texts cut in halves."""

from __future__ import annotations

from espresso_export.data.pseudo_queries import Documents, known_item_queries


def test_known_item_queries_cut_the_query_out_of_its_passage():
    passages = Documents("p", ["Paris is the capital of France. It lies on the Seine river today.",
                              "Berlin is a large city in Germany. Its wall fell in the year 1989 for good."])
    made = known_item_queries(passages, "sentence", limit=5, seed=0)
    assert made.method == "sentence" and len(made) == 2
    for query, origin, target in zip(made.texts, made.origins, made.targets):
        assert query in passages.texts[origin] and query not in target
        assert target and len(target) < len(passages.texts[origin])


def test_known_item_queries_by_title_target_the_body():
    passages = Documents("p", ["Paris Paris is the capital of France.", "Berlin Berlin is in Germany."],
                        titles=["Paris", "Berlin"])
    made = known_item_queries(passages, "auto", limit=5, seed=0)
    assert made.method == "title"  # one sentence each: titles
    bodies = {"Paris": "Paris is the capital of France.", "Berlin": "Berlin is in Germany."}
    assert {q: t for q, t in zip(made.texts, made.targets)} == bodies  # the title taken off the front


def test_short_texts_are_cut_in_halves():
    passages = Documents("p", ["a man is playing a large flute on the stage tonight",
                              "two dogs run across the green field after a red ball"])
    made = known_item_queries(passages, "auto", limit=5, seed=0)
    assert made.method == "half" and len(made) == 2
    for query, origin, target in zip(made.texts, made.origins, made.targets):
        assert f"{query} {target}" == passages.texts[origin]
