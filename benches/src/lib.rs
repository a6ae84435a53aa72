//! Benches live in `benches/`; see the README for the commands and the current figures.
