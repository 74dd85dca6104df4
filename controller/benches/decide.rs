//! The Swarm's pure decision plus its write plan, per event, at fleet sizes: 100 members
//! × 10,000 jobs, 1,000 × 100,000 and 10,000 × 1,000,000 (the last only with
//! `SHOAL_DECIDE_HUGE=1`: one event there takes seconds, and criterion runs it 11 times).
//!
//! `cargo bench -p shoal-controller --bench decide`
//!
//! An *event* is every pass from the change to the Swarm being Ready again, each pass
//! `decide` and then the write plan: what apply would send, encoded as apply encodes it
//! (each slice through `shoal_core::format::encode_slice`, the revision record serialized
//! and stored through `store_record`, the index plain or gzip). Between passes the plan
//! is carried out in memory (`apply_in_memory`, not timed), so the next pass sees the
//! cluster as apply left it (one member more at 10,000 members, the most a Swarm may
//! have, is 9,999 → 10,000). The job list is read from ConfigMaps of 50,000 keys each
//! (`jobsFrom.configMapKeyRefs`), as a Swarm of that size must. Three events, from a Swarm converged on `members` members:
//! one member more, one member less, and the first rollout of a new Swarm.
//!
//! Peak memory of one event in a process of its own:
//!
//! `SHOAL_DECIDE_MEMORY=10000x1000000:scale-up cargo bench -p shoal-controller --bench decide`
//!
//! (events `scale-up`, `scale-down`, `first-rollout`) prints the resident memory once the
//! converged Swarm is built (`VmRSS`: the observation, as the controller holds it in a
//! pass), then resets the peak (`/proc/self/clear_refs`) and prints `VmHWM` after the
//! event: the peak while deciding and encoding, on top of the observation.

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use shoal_controller::swarm::decide::{
    Decision, JobSource, MAX_MEMBERS, Observation, Operation, StoredRecord, apply_in_memory,
    decide, store_record,
};
use shoal_controller::swarm::fixtures;
use shoal_core::format::{self, EncodedText, MAX_BINARY_BYTES, MAX_PLAIN_BYTES};

/// The most passes one event may take before the bench calls it stuck.
const MAX_PASSES: usize = 12;

/// What one pass sends to the API server.
#[derive(Debug, Default, Clone, Copy)]
struct WritePlan {
    /// ConfigMap creates or applies (a split slice or record: one per part).
    writes: usize,
    /// ConfigMap deletes (stale parts, departed members, pruned history).
    deletes: usize,
    /// Pod evictions (`reload: Restart`).
    evictions: usize,
    /// Status patches (0 or 1: apply skips a status that did not change).
    status: usize,
    /// Slice ConfigMaps written (members whose slice changed).
    slices: usize,
    /// Bytes of ConfigMap data (`data` text or `binaryData` bytes before base64).
    bytes: usize,
}

impl WritePlan {
    fn requests(&self) -> usize {
        self.writes + self.deletes + self.evictions + self.status
    }

    fn add(&mut self, other: &WritePlan) {
        self.writes += other.writes;
        self.deletes += other.deletes;
        self.evictions += other.evictions;
        self.status += other.status;
        self.slices += other.slices;
        self.bytes += other.bytes;
    }
}

/// ConfigMaps and bytes of one stored text.
fn stored(encoded: &EncodedText) -> (usize, usize) {
    match encoded {
        EncodedText::Plain(text) => (1, text.len()),
        EncodedText::Gzip(bytes) => (1, bytes.len()),
        EncodedText::Split(parts) => (parts.len(), parts.iter().map(Vec::len).sum()),
    }
}

/// What apply would send for `decision`, encoded as apply encodes it.
fn write_plan(obs: &Observation, decision: &Decision) -> WritePlan {
    let mut plan = WritePlan {
        status: usize::from(decision.status != obs.status),
        ..WritePlan::default()
    };
    for operation in &decision.operations {
        match operation {
            Operation::WriteRevision(record) => {
                let text = serde_json::to_string(record).expect("a record serializes");
                let (count, bytes) = match store_record(&text, MAX_PLAIN_BYTES, MAX_BINARY_BYTES) {
                    StoredRecord::Plain(text) => (1, text.len()),
                    StoredRecord::Gzip(bytes) => (1, bytes.len()),
                    StoredRecord::Split { chunks, .. } => {
                        (chunks.len(), chunks.iter().map(Vec::len).sum())
                    }
                };
                plan.writes += count;
                plan.bytes += bytes;
            }
            Operation::WriteSlice {
                slice,
                previous_parts,
                ..
            } => {
                let (count, bytes) = stored(&format::encode_slice(slice));
                plan.writes += count;
                plan.deletes += previous_parts.saturating_sub(count);
                plan.slices += 1;
                plan.bytes += bytes;
            }
            Operation::WriteIndex { text } => {
                let (count, bytes) = stored(&format::encode_text(
                    text.clone(),
                    MAX_PLAIN_BYTES,
                    usize::MAX,
                ));
                plan.writes += count;
                plan.bytes += bytes;
            }
            Operation::DeleteSlice { parts, .. } => plan.deletes += (*parts).max(1),
            Operation::PruneRevision { .. } => plan.deletes += 1,
            Operation::Evict { .. } => plan.evictions += 1,
        }
    }
    plan
}

/// One pass: decide, then the write plan. Returns the decision and what it sends.
fn pass(obs: &Observation) -> (Decision, WritePlan) {
    let decision = decide(obs);
    let plan = write_plan(obs, &decision);
    (decision, plan)
}

/// Carries out a decision in memory, as the cluster would end up after apply.
fn carry_out(obs: &mut Observation, decision: Decision) {
    apply_in_memory(obs, &decision);
    obs.status = decision.status;
}

/// One pass's figures.
struct PassFigures {
    took: Duration,
    plan: WritePlan,
}

/// Runs passes until one plans nothing and leaves the status as it is.
fn settle(obs: &mut Observation) -> Vec<PassFigures> {
    let mut passes = Vec::new();
    for _ in 0..MAX_PASSES {
        let start = Instant::now();
        let (decision, plan) = pass(obs);
        let took = start.elapsed();
        if plan.requests() == 0 {
            return passes;
        }
        passes.push(PassFigures { took, plan });
        carry_out(obs, decision);
    }
    panic!(
        "the Swarm {} did not settle in {MAX_PASSES} passes",
        obs.swarm
    );
}

/// Keys per job-list ConfigMap: `stream:00000000, ` is 18 bytes, so 50,000 keys stay
/// under the 1 MiB a ConfigMap may hold.
const KEYS_PER_CONFIG_MAP: usize = 50_000;

/// A Swarm reading `jobs` keys from ConfigMaps of [`KEYS_PER_CONFIG_MAP`] keys
/// (`jobsFrom.configMapKeyRefs`, as users are told to do past 1 MiB), without pools.
fn job_list_in_config_maps(jobs: usize) -> Observation {
    let keys = fixtures::stream_keys(jobs, 8);
    let chunks: Vec<&[String]> = keys.chunks(KEYS_PER_CONFIG_MAP).collect();
    let name = |part: usize| format!("jobs-{part:03}");
    let refs: Vec<serde_json::Value> = (0..chunks.len())
        .map(|part| serde_json::json!({"name": name(part), "key": "config.yml"}))
        .collect();
    let spec = serde_json::from_value(serde_json::json!({"jobsFrom": {"configMapKeyRefs": refs}}))
        .expect("a spec reading ConfigMaps deserializes");
    let mut obs = fixtures::observation("bench", spec, Vec::new());
    obs.job_source = JobSource::Parts(
        chunks
            .iter()
            .enumerate()
            .map(|(part, chunk)| JobSource::Text {
                name: name(part),
                key: "config.yml".to_owned(),
                text: format!("jobs: [{}]\n", chunk.join(", ")),
            })
            .collect(),
    );
    obs
}

/// The events measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    ScaleUp,
    ScaleDown,
    FirstRollout,
}

impl Event {
    const ALL: [Event; 3] = [Event::ScaleUp, Event::ScaleDown, Event::FirstRollout];

    fn name(self) -> &'static str {
        match self {
            Event::ScaleUp => "scale-up",
            Event::ScaleDown => "scale-down",
            Event::FirstRollout => "first-rollout",
        }
    }

    fn parse(name: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|event| event.name() == name)
    }

    /// The observation the event's first pass sees.
    fn start(self, members: u32, jobs: usize) -> Observation {
        let mut obs = job_list_in_config_maps(jobs);
        obs.pools = vec![fixtures::pool("worker", members)];
        if self == Event::FirstRollout {
            return obs;
        }
        settle(&mut obs);
        let scaled = match self {
            Event::ScaleUp => members + 1,
            _ => members - 1,
        };
        obs.pools = vec![fixtures::pool("worker", scaled)];
        obs
    }

    /// The members a Swarm converges on before the event, so that one member more stays
    /// within the most a Swarm may have (at 10,000 members: 9,999 → 10,000).
    fn converged_on(self, members: u32) -> u32 {
        match self {
            Event::ScaleUp if members >= MAX_MEMBERS => MAX_MEMBERS - 1,
            _ => members,
        }
    }
}

/// Runs the event from `start`: the time of its passes (decide and write plan only) and
/// what they send.
fn run_event(start: &Observation) -> (Vec<PassFigures>, Duration) {
    let mut obs = start.clone();
    let passes = settle(&mut obs);
    let total = passes.iter().map(|figures| figures.took).sum();
    (passes, total)
}

fn describe(members: u32, jobs: usize, event: Event, passes: &[PassFigures]) {
    let mut total = WritePlan::default();
    for figures in passes {
        total.add(&figures.plan);
    }
    let per_pass: Vec<String> = passes
        .iter()
        .map(|figures| {
            format!(
                "{:.1} ms: {} slices, {} requests, {} KiB",
                figures.took.as_secs_f64() * 1e3,
                figures.plan.slices,
                figures.plan.requests(),
                figures.plan.bytes / 1024
            )
        })
        .collect();
    println!(
        "{members} members x {jobs} jobs, {}: {} passes; {} slice writes, {} requests ({} ConfigMap writes, {} deletes, {} evictions, {} status), {} KiB of ConfigMap data\n  passes: {}",
        event.name(),
        passes.len(),
        total.slices,
        total.requests(),
        total.writes,
        total.deletes,
        total.evictions,
        total.status,
        total.bytes / 1024,
        per_pass.join("; ")
    );
}

fn sizes() -> Vec<(u32, usize)> {
    let mut sizes = vec![(100u32, 10_000usize), (1_000, 100_000)];
    if std::env::var_os("SHOAL_DECIDE_HUGE").is_some() {
        sizes.push((10_000, 1_000_000));
    }
    sizes
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide_event");
    group.sample_size(10);
    for (members, jobs) in sizes() {
        for event in Event::ALL {
            let start = event.start(event.converged_on(members), jobs);
            let (passes, _) = run_event(&start);
            describe(members, jobs, event, &passes);
            group.bench_function(format!("{members}x{jobs}/{}", event.name()), |b| {
                b.iter_custom(|iterations| (0..iterations).map(|_| run_event(&start).1).sum())
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);

/// A line of `/proc/self/status` (`VmRSS`, `VmHWM`) in MiB.
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// `SHOAL_DECIDE_MEMORY=<members>x<jobs>:<event>`: one event in this process, with its
/// memory.
fn memory(spec: &str) {
    let parsed = spec.split_once(':').and_then(|(size, event)| {
        let (members, jobs) = size.split_once('x')?;
        Some((
            members.parse::<u32>().ok()?,
            jobs.parse::<usize>().ok()?,
            Event::parse(event)?,
        ))
    });
    let Some((members, jobs, event)) = parsed else {
        panic!(
            "SHOAL_DECIDE_MEMORY={spec}: expected <members>x<jobs>:<scale-up|scale-down|first-rollout>"
        );
    };
    let built = Instant::now();
    let start = event.start(event.converged_on(members), jobs);
    let built = built.elapsed();
    let setup_peak = status_mib("VmHWM");
    let held = status_mib("VmRSS");
    // Resets VmHWM to the current resident size (Linux 4.0 and later).
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let mut obs = start;
    let passes = settle(&mut obs);
    let peak = status_mib("VmHWM");
    describe(members, jobs, event, &passes);
    println!(
        "  memory: {held:.1} MiB resident holding the observation (built in {:.1} s, peak {setup_peak:.1} MiB while building); peak during the event {peak:.1} MiB{}",
        built.as_secs_f64(),
        if reset {
            ""
        } else {
            " (peak not reset: it includes building)"
        }
    );
}

fn main() {
    if let Some(spec) = std::env::var_os("SHOAL_DECIDE_MEMORY") {
        memory(&spec.to_string_lossy());
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
