//! Shoal core.
