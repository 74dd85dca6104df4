//! Slice format v1 with plan instances: the hash over jobs and instances
//! (golden vectors computed with `printf … | sha256sum`), round trips through
//! rendering and the large-slice encodings, and typed errors naming the entry.

use std::collections::BTreeMap;

use proptest::prelude::*;
use shoal_core::deploy::Port;
use shoal_core::format::{
    EncodedSlice, SliceParseError, decode_slice, encode_slice_with_limits, parse_slice,
    render_slice,
};
use shoal_core::slice::{InstanceApplication, InstanceProblem, SliceInstance, canonical_hash};
use shoal_core::{JobSet, Slice};

fn application(name: &str, coordinates: &[(&str, &str)]) -> InstanceApplication {
    InstanceApplication {
        name: name.to_owned(),
        coordinates: coordinates
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
        ports: Vec::new(),
    }
}

fn web(n: u32) -> SliceInstance {
    SliceInstance {
        name: format!("web-{n}"),
        plan: "web".to_owned(),
        deployment: 4,
        applications: vec![
            application("php", &[("version", "8.3")]),
            application("nginx", &[("port", "80"), ("image", "nginx:1.27")]),
        ],
    }
}

fn jobs(keys: &[&str]) -> JobSet {
    JobSet::parse(keys.iter().copied()).unwrap()
}

fn with(keys: &[&str], instances: Vec<SliceInstance>) -> Slice {
    Slice::new("demo", "swarm-worker-0", 3, jobs(keys))
        .with_instances(instances)
        .unwrap()
}

#[test]
fn the_hash_of_a_slice_with_instances_matches_its_golden_vector() {
    // printf 'stream:a\n\036instances\ninstance 5:web-0 3:web 4\napplication 5:nginx\n
    //   coordinate 5:image 10:nginx:1.27\ncoordinate 4:port 2:80\napplication 3:php\n
    //   coordinate 7:version 3:8.3\n' + the same for web-1 | sha256sum
    let slice = with(&["stream:a"], vec![web(1), web(0)]);
    assert_eq!(
        slice.hash,
        "sha256:4e2f456b4ff7583d99a3632f90a6b0518b8d97e99e3871b6fdb88ec9d75565b2"
    );
    // printf '\036instances\ninstance 7:batch-2 5:batch 1\n' | sha256sum
    let lone = SliceInstance {
        name: "batch-2".into(),
        plan: "batch".into(),
        deployment: 1,
        applications: Vec::new(),
    };
    assert_eq!(
        with(&[], vec![lone]).hash,
        "sha256:8d1d4c984a2bf3a4b3676645f30b7bd559d68f6c8f9a1ef7492aabb134e7fcc7"
    );
}

#[test]
fn a_slice_without_instances_keeps_the_jobs_only_hash_and_rendering() {
    let plain = Slice::new("demo", "swarm-worker-0", 3, jobs(&["a", "b"]));
    let built = plain.clone().with_instances(Vec::new()).unwrap();
    assert_eq!(built, plain);
    assert_eq!(built.hash, canonical_hash(&jobs(&["a", "b"])));
    assert!(!render_slice(&built).contains("instances"));
}

#[test]
fn instances_render_sorted_in_the_documented_shape() {
    let rendered = render_slice(&with(&["stream:a"], vec![web(1), web(0)]));
    let tail = rendered.split_once("jobs:\n- stream:a\n").unwrap().1;
    assert_eq!(
        tail,
        "instances:\n\
         - name: web-0\n  plan: web\n  deployment: 4\n  applications:\n\
         \x20 - name: nginx\n    coordinates:\n      image: nginx:1.27\n      port: \"80\"\n\
         \x20 - name: php\n    coordinates:\n      version: \"8.3\"\n\
         - name: web-1\n  plan: web\n  deployment: 4\n  applications:\n\
         \x20 - name: nginx\n    coordinates:\n      image: nginx:1.27\n      port: \"80\"\n\
         \x20 - name: php\n    coordinates:\n      version: \"8.3\"\n"
    );
}

#[test]
fn a_slice_with_instances_round_trips_through_every_encoding() {
    let keys: Vec<String> = (0..3000).map(|i| format!("stream:{i:05}")).collect();
    let slice = Slice::new("demo", "swarm-worker-0", 9, JobSet::parse(keys).unwrap())
        .with_instances(vec![web(0), web(2)])
        .unwrap();
    assert_eq!(parse_slice(&render_slice(&slice)), Ok(slice.clone()));
    for (plain, binary) in [(usize::MAX, usize::MAX), (64, usize::MAX), (64, 1024)] {
        let encoded = encode_slice_with_limits(&slice, plain, binary);
        if binary == 1024 {
            assert!(matches!(encoded, EncodedSlice::Split(_)));
        }
        assert_eq!(decode_slice(&encoded), Ok(slice.clone()));
    }
}

#[test]
fn a_hand_edited_coordinate_fails_the_hash_check() {
    let text = render_slice(&with(&[], vec![web(0)])).replace("nginx:1.27", "nginx:evil");
    assert!(matches!(
        parse_slice(&text),
        Err(SliceParseError::HashMismatch { .. })
    ));
}

#[test]
fn duplicate_unsorted_or_misnamed_instances_are_refused_naming_the_entry() {
    let duplicate = Slice::new("demo", "m-0", 1, jobs(&[]))
        .with_instances(vec![web(0), web(0)])
        .unwrap_err();
    assert_eq!(
        duplicate.to_string(),
        "instances[1] \"web-0\" is a duplicate of instances[0]"
    );
    let mut misnamed = web(0);
    misnamed.name = "web-x".into();
    assert_eq!(
        Slice::new("demo", "m-0", 1, jobs(&[]))
            .with_instances(vec![misnamed])
            .unwrap_err(),
        InstanceProblem::BadName {
            position: 0,
            name: "web-x".into(),
            plan: "web".into()
        }
    );
    let mut twice = web(0);
    twice.applications.push(application("php", &[]));
    assert!(matches!(
        Slice::new("demo", "m-0", 1, jobs(&[])).with_instances(vec![twice]),
        Err(InstanceProblem::DuplicateApplication { .. })
    ));
    let mut control = web(0);
    control.applications[0]
        .coordinates
        .insert("bad\nkey".into(), "v".into());
    let error = Slice::new("demo", "m-0", 1, jobs(&[]))
        .with_instances(vec![control])
        .unwrap_err()
        .to_string();
    assert!(error.contains("instances[0] \"web-0\""), "{error}");
    assert!(error.contains("control character"), "{error}");

    let document = render_slice(&with(&[], vec![web(0), web(1)]));
    let swapped = document
        .replace("name: web-0", "name: web-TMP")
        .replace("name: web-1", "name: web-0")
        .replace("name: web-TMP", "name: web-1");
    assert_eq!(
        parse_slice(&swapped).unwrap_err(),
        SliceParseError::UnsortedInstances {
            position: 1,
            name: "web-0".into()
        }
    );
    let no_deployment = document.replacen("  deployment: 4\n", "", 1);
    assert_eq!(
        parse_slice(&no_deployment).unwrap_err().to_string(),
        "slice field `instances[0] (web-0).deployment` must be a non-negative integer"
    );
    let not_a_list = document
        .split_once("instances:")
        .map(|(head, _)| format!("{head}instances: web-0\n"))
        .unwrap();
    assert_eq!(
        parse_slice(&not_a_list).unwrap_err().to_string(),
        "slice field `instances` must be a list of instances"
    );
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,6}",
        Just("yes".to_owned()),
        Just("007".to_owned()),
        Just("1.5".to_owned()),
        Just("a: b".to_owned()),
        Just("- x".to_owned()),
        Just("#c".to_owned()),
        Just("it's \"q\"".to_owned()),
        Just("null".to_owned()),
        Just("é ~".to_owned()),
    ]
}

fn instances() -> impl Strategy<Value = Vec<SliceInstance>> {
    let applications = prop::collection::btree_map(
        "[a-z][a-z0-9-]{0,5}",
        prop::collection::btree_map(
            text(),
            prop_oneof![text(), Just("multi\nline".to_owned())],
            0..4,
        ),
        0..3,
    );
    prop::collection::btree_map((0u32..20, 0u64..1000), applications, 0..4).prop_map(|entries| {
        entries
            .into_iter()
            .map(|((n, deployment), applications)| SliceInstance {
                name: format!("plan-{n}"),
                plan: "plan".to_owned(),
                deployment,
                applications: applications
                    .into_iter()
                    .map(|(name, coordinates)| InstanceApplication::new(name, coordinates))
                    .collect(),
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_instance_list_round_trips_and_its_hash_ignores_input_order(list in instances()) {
        // Several entries with the same n collapse to one name: keep the first.
        let mut unique: BTreeMap<String, SliceInstance> = BTreeMap::new();
        for instance in list {
            unique.entry(instance.name.clone()).or_insert(instance);
        }
        let list: Vec<SliceInstance> = unique.into_values().collect();
        let slice = with(&["j"], list.clone());
        prop_assert_eq!(parse_slice(&render_slice(&slice)), Ok(slice.clone()));
        let reversed = with(&["j"], list.iter().rev().cloned().collect());
        prop_assert_eq!(&reversed.hash, &slice.hash);
        if list.is_empty() {
            prop_assert_eq!(&slice.hash, &canonical_hash(&jobs(&["j"])));
        } else {
            prop_assert_ne!(&slice.hash, &canonical_hash(&jobs(&["j"])));
        }
    }

    #[test]
    fn a_changed_deployment_or_coordinate_changes_the_hash(list in instances(), bump in 1u64..5) {
        let mut unique: BTreeMap<String, SliceInstance> = BTreeMap::new();
        for instance in list {
            unique.entry(instance.name.clone()).or_insert(instance);
        }
        let list: Vec<SliceInstance> = unique.into_values().collect();
        prop_assume!(!list.is_empty());
        let before = with(&[], list.clone()).hash;
        let mut moved = list.clone();
        moved[0].deployment += bump;
        prop_assert_ne!(&with(&[], moved).hash, &before);
        let mut recoordinated = list.clone();
        recoordinated[0].applications.push(application("zzz-added", &[("k", "v")]));
        prop_assert_ne!(&with(&[], recoordinated).hash, &before);
        let mut ported = list;
        ported[0].applications.push(application("zzz-added", &[]));
        let unported = with(&[], ported.clone()).hash;
        let last = ported[0].applications.len() - 1;
        ported[0].applications[last].ports.push(Port::tcp(80));
        prop_assert_ne!(&with(&[], ported).hash, &unported);
    }
}

#[test]
fn instance_reports_read_and_write_the_documented_lease_annotation() {
    use shoal_core::slice::{InstanceReport, InstanceState};
    let documented = r#"{"web-0":{"state":"installed","deployment":4},"web-1":{"state":"failed","deployment":4,"code":"ExitCode3","message":"process exited with exit status: 3: bad image"}}"#;
    let reports: BTreeMap<String, InstanceReport> = serde_json::from_str(documented).unwrap();
    assert_eq!(
        reports["web-0"],
        InstanceReport::new(InstanceState::Installed, 4)
    );
    assert_eq!(reports["web-1"].code.as_deref(), Some("ExitCode3"));
    assert_eq!(serde_json::to_string(&reports).unwrap(), documented);
    for state in [
        "pending",
        "installing",
        "installed",
        "removing",
        "removed",
        "failed",
    ] {
        let text = format!(r#"{{"state":"{state}","deployment":1}}"#);
        let report: InstanceReport = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&report).unwrap(), text);
    }
    let long = InstanceReport::failed(1, "ExitCode1", &"é".repeat(500));
    let message = long.message.unwrap();
    assert!(message.len() <= shoal_core::slice::MAX_REPORT_MESSAGE_BYTES);
    assert!(message.ends_with('…'));
}

#[test]
fn ports_enter_the_hash_and_the_document_and_read_back_sorted() {
    let mut nginx = application("nginx", &[("image", "nginx:1.27")]);
    nginx.ports = vec![Port::udp(53), Port::tcp(80)];
    let instance = SliceInstance {
        name: "web-0".into(),
        plan: "web".into(),
        deployment: 4,
        applications: vec![nginx],
    };
    // printf '\036instances\ninstance 5:web-0 3:web 4\napplication 5:nginx\n
    //   coordinate 5:image 10:nginx:1.27\nport TCP 80\nport UDP 53\n' | sha256sum
    let slice = with(&[], vec![instance]);
    assert_eq!(
        slice.hash,
        "sha256:0f775639b878424eca5aaa128af06b7f5c27f3898aecd39ece388a1660092124"
    );
    let rendered = render_slice(&slice);
    assert!(
        rendered.contains(
            "    ports:\n    - protocol: TCP\n      port: 80\n    - protocol: UDP\n      port: 53\n"
        ),
        "{rendered}"
    );
    assert_eq!(parse_slice(&rendered), Ok(slice.clone()));
    // A document written before ports existed reads as no ports, hashing as before.
    let unported = with(
        &[],
        vec![SliceInstance {
            applications: vec![application("nginx", &[("image", "nginx:1.27")])],
            ..slice.instances[0].clone()
        }],
    );
    assert!(!render_slice(&unported).contains("ports"));
    assert_ne!(unported.hash, slice.hash);
    let swapped = rendered.replace(
        "    - protocol: TCP\n      port: 80\n    - protocol: UDP\n      port: 53\n",
        "    - protocol: UDP\n      port: 53\n    - protocol: TCP\n      port: 80\n",
    );
    assert_eq!(
        parse_slice(&swapped).unwrap_err().to_string(),
        "slice field `instances[0].applications[0].ports` of \"web-0\" is not sorted (TCP before UDP, then by number)"
    );
    let bad = rendered.replace("port: 80", "port: 70000");
    assert_eq!(
        parse_slice(&bad).unwrap_err().to_string(),
        "slice field `instances[0] (web-0).applications[0].ports` must be a list of {protocol: TCP|UDP, port: 1-65535}"
    );
    let mut twice = slice.instances[0].clone();
    twice.applications[0].ports = vec![Port::tcp(80), Port::tcp(80)];
    assert_eq!(
        Slice::new("demo", "m-0", 1, jobs(&[]))
            .with_instances(vec![twice])
            .unwrap_err()
            .to_string(),
        "instances[0] \"web-0\": application \"nginx\" lists port TCP/80 twice"
    );
}
