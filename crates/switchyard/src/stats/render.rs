//! Text renderings of the counters.
