//! Shoal worker.
