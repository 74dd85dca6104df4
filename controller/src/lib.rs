//! Shoal controller.
