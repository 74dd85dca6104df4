//! Simulated cluster controllers (StatefulSet, kubelet) acting through the public API.
