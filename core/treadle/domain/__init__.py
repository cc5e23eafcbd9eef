"""Plain data the rest of treadle speaks: content blocks, messages, events, runs. No I/O."""
