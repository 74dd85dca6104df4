//! Shoal core: the pure, deterministic heart of the operator.
//!
//! Everything in this crate is a function of its inputs: no I/O, no clocks, no
//! randomness, no async. The controller and the sidecar are thin layers over it.
//!
//! * [`job`]: validated job keys and the sorted, unique [`job::JobSet`].
//! * [`member`]: pool members ([`member::MemberId`] = pool + ordinal, or a generated pod name) with
//!   availability, capabilities and capacity.
//! * [`hash`]: the frozen 64-bit key hash (XXH3-64, seed 0) and the derived
//!   mixing used by every strategy.
//! * [`strategy`]: `bounded` (default), `jump`, `ring` and the stateful `sticky`,
//!   [`strategy::assign`] and [`strategy::reassign`] (from the assignment in force).
//! * [`assignment`], [`slice`](mod@slice), [`diff`](mod@diff): the result, per-member slices with
//!   canonical hashes, and the difference between two results.
//! * [`deploy`]: deployment plans: scored capabilities and requirements, sticky
//!   domain-spread placement of plan instances, operations and their state
//!   machine, update-domain rollout order.
//! * [`rollout`]: ordered rollouts, one part (pool or update domain) at a time,
//!   decided from what is observed: order, pause, failure, supersede.
//! * [`format`](mod@format): slice format v1, the seed-compatible index document, large-slice encoding.
//! * [`names`]: names of cluster objects, labels and annotations.
//! * [`managed_fields`]: who owns which fields (`metadata.managedFields`), read once for
//!   the controller and the sidecar.
//! * [`seed`]: the seed's 27-stream job list, reused by examples and the sandbox.
//! * [`log_format`]: the binaries' `--log-format text|json` choice.
//! * [`window`]: maintenance windows (cron start, duration, time zone): whether an approved
//!   change may start now, and when the next window opens.
//! * [`exposition`]: the `/metrics` text format a scraper asks for, and the Prometheus
//!   text format made from the registries' OpenMetrics.

pub mod assignment;
pub mod deploy;
pub mod diff;
pub mod duration;
pub mod exposition;
pub mod format;
pub mod gate;
pub mod hash;
pub mod job;
pub mod log_format;
pub mod managed_fields;
pub mod member;
pub mod names;
pub mod rollout;
pub mod seed;
pub mod slice;
pub mod strategy;
pub mod window;

pub use assignment::Assignment;
pub use diff::{Diff, diff};
pub use job::{InvalidJobs, JobKey, JobSet, JobSetting, JobSettings};
pub use member::{Member, MemberId, MemberKey};
pub use slice::{InstanceApplication, Slice, SliceInstance};
pub use strategy::{AssignError, Strategy, assign, reassign, reassign_cordoned, reassign_weighted};
