//! The emulated API server.
