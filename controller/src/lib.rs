//! Shoal controller: Swarms and labelled StatefulSets in, versioned per-member slices out.

pub mod crd;
pub mod plan;
