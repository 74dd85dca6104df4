//! The seed's job list (k8s-swarm's `swarm-worker-config`), in the seed's order.

/// The 27 streams of the k8s-swarm seed, in the order the seed lists them.
/// Examples, golden tests and the sandbox use this list.
pub const SEED_STREAMS: [&str; 27] = [
    "stream:xxrtve1",
    "stream:xxrtve2",
    "stream:zrtve2:new",
    "stream:zrtve1:new",
    "stream:zrtve0:new",
    "stream:cctv0:updated",
    "stream:history:new",
    "stream:foo:new",
    "stream:xxctv3:new",
    "stream:cctv3:updated",
    "stream:xxctv0:updated",
    "stream:xxctv10:updated",
    "stream:xxctv11:updated",
    "stream:xxctv12:updated",
    "stream:xxctv13:updated",
    "stream:xxctv14:updated",
    "stream:yxctv1:updated",
    "stream:yxctv2:updated",
    "stream:yxctv3:updated",
    "stream:xabcn0:updated",
    "stream:xacb01:updated",
    "stream:xacb02:updated",
    "stream:xacb03:updated",
    "stream:xacb04:updated",
    "stream:sportnews0:updated",
    "stream:cars:new",
    "stream:cars:updated",
];

/// The seed's pool name (`swarm-worker-0`, `swarm-worker-1`, … are its pods).
pub const SEED_POOL: &str = "swarm-worker";
