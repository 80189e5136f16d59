"""``auto``: the search for the smallest model that keeps what the user asks (:mod:`.search`)."""
