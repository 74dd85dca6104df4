//! Shoal test infrastructure.
