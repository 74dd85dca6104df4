//! The sandbox: emulator, controller and sidecars in one process.

pub mod members;
