//! The `sticky` strategy in the sandbox, as a user drives it: the demo's 27 streams
//! on 2 → 3 → 4 → 3 members under Manual approval, through the real kubectl and the
//! `kubectl shoal` plugin. Each pending revision reports (in `status.pendingRevision`
//! and in `kubectl shoal diff`) exactly the lower bound of jobs moved, computed here
//! from the slices alone; approving it moves exactly those jobs. The scale-down to 3
//! only re-homes the leaving member's jobs, which Manual applies without waiting (it
//! disrupts nothing that runs): it too moves exactly the bound.
//!
//! Emulator-only by design, like `sandbox.rs`: the sandbox is the emulated cluster
//! plus Shoal, with the sidecars as local processes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use kube::Api;
use shoal_controller::api::swarm::{PendingRevision, Swarm};
use shoal_controller::plugin::preview::DiffReport;
use shoal_sandbox::{Converged, Options, Sandbox, kubectl_shoal};

const CONVERGE: Duration = Duration::from_secs(90);

/// Jobs by member, as the members hold them.
fn jobs_by_member(converged: &Converged) -> BTreeMap<String, BTreeSet<String>> {
    converged
        .slices
        .iter()
        .map(|(pod, slice)| (pod.clone(), slice.jobs.iter().cloned().collect()))
        .collect()
}

/// The fewest jobs any balanced assignment over `after` members must move, from
/// `before` (jobs by member). With k jobs over m members, a balanced assignment gives
/// each member q = floor(k/m) jobs and r = k mod m members one more. A job can stay
/// only on a member that stays, and at most its quota of them, so at most
/// kept = Σ over staying members of min(load, quota) stay, with the r larger quotas
/// given to the staying members holding the most; the bound is k − kept. For
/// n → n+1 that is the sum of the surplus each old member sheds; for a member
/// leaving, its jobs plus any surplus of the others.
fn lower_bound(before: &BTreeMap<String, BTreeSet<String>>, after: &[String]) -> usize {
    let k: usize = before.values().map(BTreeSet::len).sum();
    let m = after.len();
    let (quota, larger) = (k / m, k % m);
    let mut staying: Vec<usize> = after
        .iter()
        .filter_map(|pod| before.get(pod).map(BTreeSet::len))
        .collect();
    staying.sort_unstable_by(|a, b| b.cmp(a));
    let kept: usize = staying
        .iter()
        .enumerate()
        .map(|(rank, load)| (*load).min(quota + usize::from(rank < larger)))
        .sum();
    k - kept
}

/// Jobs whose owner differs between `before` and `after`, counting only jobs in both.
fn moved(
    before: &BTreeMap<String, BTreeSet<String>>,
    after: &BTreeMap<String, BTreeSet<String>>,
) -> usize {
    let owner = |slices: &BTreeMap<String, BTreeSet<String>>| -> BTreeMap<String, String> {
        slices
            .iter()
            .flat_map(|(pod, jobs)| jobs.iter().map(move |job| (job.clone(), pod.clone())))
            .collect()
    };
    let (old, new) = (owner(before), owner(after));
    old.iter()
        .filter(|(job, pod)| new.get(*job).is_some_and(|now| now != *pod))
        .count()
}

async fn pending_after(sandbox: &Sandbox, revision: u64) -> PendingRevision {
    let swarms: Api<Swarm> = Api::namespaced(sandbox.client(), sandbox.namespace());
    let started = Instant::now();
    loop {
        let status = swarms
            .get("demo")
            .await
            .expect("the Swarm exists")
            .status
            .unwrap_or_default();
        if let Some(pending) = status
            .pending_revision
            .clone()
            .filter(|p| p.revision > revision)
        {
            assert_eq!(
                status.current_revision, revision,
                "nothing applied before approval"
            );
            return pending;
        }
        assert!(
            started.elapsed() < CONVERGE,
            "no pending revision after {revision}; status {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn shoal(sandbox: &Sandbox, args: &[&str]) -> String {
    kubectl_shoal(&sandbox.kubeconfig_path(), sandbox.namespace(), args)
        .await
        .unwrap_or_else(|error| panic!("kubectl shoal {args:?}: {error}"))
}

async fn start(dir: &Path) -> Sandbox {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    Sandbox::start(Options::new(dir))
        .await
        .expect("the sandbox starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_scaling_two_three_four_three_moves_exactly_the_lower_bound_at_each_approval() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sandbox = start(dir.path()).await;
    let first = sandbox.wait_converged(CONVERGE).await.expect("converges");
    let kubectl = sandbox.kubectl().clone();
    kubectl
        .run(&[
            "patch",
            "swarm",
            "demo",
            "--type",
            "merge",
            "-p",
            // The demo already runs the default strategy, sticky.
            r#"{"spec":{"approval":{"policy":"Manual"}}}"#,
        ])
        .await
        .expect("kubectl patch succeeds");
    let mut revision = first.revision;
    let mut before = jobs_by_member(&first);
    assert_eq!(before.values().map(BTreeSet::len).sum::<usize>(), 27);

    // 2 -> 3: each old member sheds its surplus over 9 (14 + 13 - 18 = 9);
    // 3 -> 4: quotas 7, 7, 7, 6, so each old member sheds 2 (6);
    // 4 -> 3: the leaving member's 6 jobs, nothing else.
    for (members, expected) in [(3usize, 9usize), (4, 6), (3, 6)] {
        kubectl
            .run(&[
                "scale",
                "statefulset",
                "swarm-worker",
                &format!("--replicas={members}"),
            ])
            .await
            .expect("kubectl scale succeeds");
        let after: Vec<String> = (0..members).map(|i| format!("swarm-worker-{i}")).collect();
        let bound = lower_bound(&before, &after);
        assert_eq!(
            bound,
            expected,
            "the bound for {} -> {members}",
            before.len()
        );
        let growing = members > before.len();
        let applied = if growing {
            let pending = pending_after(&sandbox, revision).await;
            assert_eq!(
                (pending.summary.jobs_moved, pending.summary.lower_bound),
                (bound as u64, bound as u64),
                "{} -> {members}: {:?}",
                before.len(),
                pending.summary
            );
            let preview: DiffReport =
                serde_json::from_str(&shoal(&sandbox, &["diff", "demo", "-o", "json"]).await)
                    .expect("a diff report");
            assert_eq!(preview.revision, Some(pending.revision));
            assert_eq!(preview.summary.as_ref(), Some(&pending.summary));
            assert_eq!(preview.moves.len(), bound);
            shoal(
                &sandbox,
                &[
                    "approve",
                    "demo",
                    "--revision",
                    &pending.revision.to_string(),
                ],
            )
            .await;
            pending.revision
        } else {
            // A member leaving: its jobs run nowhere until re-homed, and re-homing them
            // disrupts nothing that runs, so even Manual applies it at once (README
            // "What needs approval"); it still moves only the bound.
            revision + 1
        };
        let converged = sandbox
            .wait_converged_with(members, CONVERGE)
            .await
            .expect("converges");
        assert_eq!(converged.revision, applied);
        let now = jobs_by_member(&converged);
        assert_eq!(moved(&before, &now), bound, "{before:?} -> {now:?}");
        let loads: BTreeSet<usize> = now.values().map(BTreeSet::len).collect();
        assert!(
            loads
                .iter()
                .all(|load| (27 / members..=27usize.div_ceil(members)).contains(load)),
            "unbalanced: {now:?}"
        );
        assert_eq!(now.values().map(BTreeSet::len).sum::<usize>(), 27);
        revision = applied;
        before = now;
    }
    sandbox.shutdown().await.expect("stops cleanly");
}
