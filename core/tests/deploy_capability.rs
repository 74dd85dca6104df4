//! Scored capabilities: the annotation grammar, the catalogue, and every
//! requirement comparator (table tests).

use proptest::prelude::*;
use shoal_core::MemberId;
use shoal_core::deploy::capability::{
    CapabilityParseError, CatalogueConflict, RequirementError, resolve_all,
};
use shoal_core::deploy::{Capabilities, Catalogue, Comparator, Requirement};

fn parsed(text: &str) -> Capabilities {
    Capabilities::parse(text).unwrap_or_else(|error| panic!("{text:?}: {error}"))
}

#[test]
fn the_documented_example_parses_with_default_score_zero() {
    let capabilities = parsed("GPU=nvidia-v100:3,nvidia-p100:2;CPU=intel-xeon");
    assert_eq!(capabilities.score("GPU", "nvidia-v100"), Some(3));
    assert_eq!(capabilities.score("GPU", "nvidia-p100"), Some(2));
    assert_eq!(capabilities.score("CPU", "intel-xeon"), Some(0));
    assert_eq!(capabilities.score("CPU", "nvidia-v100"), None);
    assert_eq!(
        capabilities.to_string(),
        "CPU=intel-xeon:0;GPU=nvidia-p100:2,nvidia-v100:3"
    );
}

#[test]
fn spaces_around_tokens_are_ignored_and_empty_text_offers_nothing() {
    assert_eq!(
        parsed(" GPU = v100 : 3 , p100 ; CPU=xeon "),
        parsed("GPU=v100:3,p100:0;CPU=xeon:0")
    );
    assert_eq!(parsed(""), Capabilities::none());
    assert_eq!(parsed("   "), Capabilities::none());
}

#[test]
fn every_malformed_annotation_is_refused_naming_the_offending_entry() {
    let empty = |text: &str| CapabilityParseError::EmptyEntry {
        text: text.to_owned(),
    };
    let table: Vec<(&str, CapabilityParseError)> = vec![
        ("GPU=v100;", empty("GPU=v100;")),
        ("GPU=v100;;CPU=x", empty("GPU=v100;;CPU=x")),
        ("GPU=v100,,p100", empty("GPU=v100,,p100")),
        ("GPU=", empty("GPU=")),
        (
            "GPU",
            CapabilityParseError::MissingEquals {
                entry: "GPU".to_owned(),
            },
        ),
        (
            "=v100",
            CapabilityParseError::BadName {
                entry: "=v100".to_owned(),
                name: String::new(),
            },
        ),
        (
            "GPU=-v100",
            CapabilityParseError::BadName {
                entry: "-v100".to_owned(),
                name: "-v100".to_owned(),
            },
        ),
        (
            "GPU=nv idia",
            CapabilityParseError::BadName {
                entry: "nv idia".to_owned(),
                name: "nv idia".to_owned(),
            },
        ),
        (
            "GPU=v100:high",
            CapabilityParseError::BadScore {
                entry: "v100:high".to_owned(),
                score: "high".to_owned(),
            },
        ),
        (
            "GPU=v100:+3",
            CapabilityParseError::BadScore {
                entry: "v100:+3".to_owned(),
                score: "+3".to_owned(),
            },
        ),
        (
            "GPU=v100:4294967296",
            CapabilityParseError::BadScore {
                entry: "v100:4294967296".to_owned(),
                score: "4294967296".to_owned(),
            },
        ),
        (
            "GPU=v100:",
            CapabilityParseError::BadScore {
                entry: "v100:".to_owned(),
                score: String::new(),
            },
        ),
        (
            "GPU=v100;GPU=p100",
            CapabilityParseError::DuplicateType {
                capability_type: "GPU".to_owned(),
            },
        ),
        (
            "GPU=v100:1,v100:2",
            CapabilityParseError::DuplicateName {
                capability_type: "GPU".to_owned(),
                name: "v100".to_owned(),
            },
        ),
    ];
    for (text, expected) in table {
        assert_eq!(Capabilities::parse(text), Err(expected), "{text:?}");
    }
    for text in ["GPU=v100-", "GPU=.v100", "GPU-=v100"] {
        assert!(
            matches!(
                Capabilities::parse(text),
                Err(CapabilityParseError::BadName { .. })
            ),
            "{text:?}"
        );
    }
    let long = format!("GPU={}", "a".repeat(64));
    assert!(matches!(
        Capabilities::parse(&long),
        Err(CapabilityParseError::BadName { .. })
    ));
    assert_eq!(
        Capabilities::parse("GPU=v100:high")
            .unwrap_err()
            .to_string(),
        "capability entry \"v100:high\": score \"high\" is not a whole number from 0 to 4294967295"
    );
}

#[test]
fn the_catalogue_refuses_one_capability_with_two_scores_naming_both_members() {
    let a = MemberId::new("gpu", 0);
    let b = MemberId::new("gpu", 1);
    let first = parsed("GPU=v100:3");
    let second = parsed("GPU=v100:2");
    let expected = CatalogueConflict {
        capability_type: "GPU".to_owned(),
        name: "v100".to_owned(),
        first: a.clone(),
        first_score: 3,
        second: b.clone(),
        second_score: 2,
    };
    // Whatever the input order, members are read in member order.
    assert_eq!(
        Catalogue::build([(&b, &second), (&a, &first)]),
        Err(expected.clone())
    );
    assert_eq!(
        Catalogue::build([(&a, &first), (&b, &second)]),
        Err(expected)
    );
    assert_eq!(
        Catalogue::build([(&b, &second), (&a, &first)])
            .unwrap_err()
            .to_string(),
        "capability GPU=v100 scores 3 on member gpu-0 but 2 on member gpu-1; a capability must score the same everywhere"
    );
    let same = Catalogue::build([(&a, &first), (&b, &first)]).unwrap();
    assert_eq!(same.score("GPU", "v100"), Some(3));
}

/// The catalogue of the comparator table: GPUs k80 (1) < p100 (2) < v100 (3).
fn gpu_catalogue() -> Catalogue {
    let declared = parsed("GPU=k80:1,p100:2,v100:3;CPU=xeon,epyc");
    let member = MemberId::new("any", 0);
    Catalogue::build([(&member, &declared)]).unwrap()
}

#[test]
fn every_comparator_meets_exactly_the_documented_members() {
    let catalogue = gpu_catalogue();
    let members = [
        ("none", ""),
        ("k80", "GPU=k80:1"),
        ("p100", "GPU=p100:2"),
        ("v100", "GPU=v100:3"),
        ("k80+v100", "GPU=k80:1,v100:3"),
        ("xeon", "CPU=xeon"),
    ];
    use Comparator::*;
    // (type, comparator, names, the members meeting it)
    let table: Vec<(&str, Comparator, Vec<&str>, Vec<&str>)> = vec![
        (
            "GPU",
            In,
            vec!["p100", "v100"],
            vec!["p100", "v100", "k80+v100"],
        ),
        ("GPU", In, vec!["t4"], vec![]),
        ("CPU", In, vec!["xeon"], vec!["xeon"]),
        (
            "GPU",
            NotIn,
            vec!["v100"],
            vec!["none", "k80", "p100", "xeon"],
        ),
        (
            "GPU",
            NotIn,
            vec!["t4"],
            vec!["none", "k80", "p100", "v100", "k80+v100", "xeon"],
        ),
        // Gte: at least the lowest named score (p100 = 2).
        (
            "GPU",
            Gte,
            vec!["p100", "v100"],
            vec!["p100", "v100", "k80+v100"],
        ),
        ("GPU", Gte, vec!["v100"], vec!["v100", "k80+v100"]),
        (
            "GPU",
            Gte,
            vec!["k80"],
            vec!["k80", "p100", "v100", "k80+v100"],
        ),
        // Lte: at most the highest named score (p100 = 2), some capability qualifies.
        (
            "GPU",
            Lte,
            vec!["k80", "p100"],
            vec!["k80", "p100", "k80+v100"],
        ),
        ("GPU", Lte, vec!["k80"], vec!["k80", "k80+v100"]),
        (
            "GPU",
            Lte,
            vec!["v100"],
            vec!["k80", "p100", "v100", "k80+v100"],
        ),
        // Score-0 capabilities compare too.
        ("CPU", Gte, vec!["epyc"], vec!["xeon"]),
        ("CPU", Lte, vec!["epyc"], vec!["xeon"]),
    ];
    for (capability_type, comparator, names, meeting) in table {
        let requirement = Requirement::new(capability_type, comparator, names);
        let resolved = requirement.resolve(&catalogue).unwrap();
        let met: Vec<&str> = members
            .iter()
            .filter(|(_, text)| resolved.is_met_by(&parsed(text)))
            .map(|(label, _)| *label)
            .collect();
        assert_eq!(met, meeting, "{requirement}");
    }
}

#[test]
fn a_requirement_without_names_or_with_an_unscored_reference_is_refused() {
    let catalogue = gpu_catalogue();
    let empty = Requirement::new("GPU", Comparator::In, Vec::<String>::new());
    assert_eq!(
        empty.resolve(&catalogue),
        Err(RequirementError::NoNames {
            requirement: empty.clone()
        })
    );
    let unknown = Requirement::new("GPU", Comparator::Gte, ["v100", "h100"]);
    assert_eq!(
        unknown.resolve(&catalogue).unwrap_err().to_string(),
        "requirement \"GPU Gte [h100, v100]\": no member declares GPU=h100, so it has no score to compare with"
    );
    // In and NotIn need no score: an undeclared name simply matches nobody.
    assert!(
        Requirement::new("GPU", Comparator::In, ["h100"])
            .resolve(&catalogue)
            .is_ok()
    );
}

#[test]
fn requirements_resolve_in_canonical_order_whatever_order_they_were_written() {
    let catalogue = gpu_catalogue();
    let gpu = Requirement::new("GPU", Comparator::Gte, ["p100"]);
    let cpu = Requirement::new("CPU", Comparator::In, ["xeon"]);
    let forward = resolve_all(&[gpu.clone(), cpu.clone()], &catalogue).unwrap();
    let backward = resolve_all(&[cpu.clone(), gpu.clone(), cpu], &catalogue).unwrap();
    assert_eq!(forward, backward);
    assert_eq!(forward.len(), 2);
}

#[test]
fn comparators_read_back_from_their_names_and_serde() {
    for comparator in Comparator::ALL {
        assert_eq!(comparator.as_str().parse::<Comparator>(), Ok(comparator));
        let json = serde_json::to_string(&comparator).unwrap();
        assert_eq!(json, format!("\"{comparator}\""));
        assert_eq!(
            serde_json::from_str::<Comparator>(&json).unwrap(),
            comparator
        );
    }
    assert_eq!(
        "eq".parse::<Comparator>().unwrap_err().to_string(),
        "\"eq\" is not a valid comparator; expected one of: In, NotIn, Gte, Lte"
    );
}

fn capability_name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9]([a-zA-Z0-9._-]{0,8}[a-zA-Z0-9])?"
}

proptest! {
    #[test]
    fn the_canonical_text_parses_back_to_the_same_capabilities(
        declared in prop::collection::btree_map(
            capability_name(),
            prop::collection::btree_map(capability_name(), any::<u32>(), 1..4),
            0..4,
        )
    ) {
        let mut capabilities = Capabilities::none();
        for (capability_type, names) in &declared {
            for (name, score) in names {
                capabilities = capabilities.with(capability_type, name, *score);
            }
        }
        let text = capabilities.to_string();
        prop_assert_eq!(Capabilities::parse(&text), Ok(capabilities));
    }
}
