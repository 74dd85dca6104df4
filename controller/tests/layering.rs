//! The controller's import direction, enforced: this test reads the `crate::` and
//! `super::` paths of every source file under `controller/src` and fails on an edge
//! against the layering below.
//!
//! * Pure layers (the API types, the plain shared data, each kind's decision) import no
//!   I/O layer, name no `kube::Api`/`kube::Client`, no `tokio`, and have no `async fn`.
//! * A layer imports only layers of its rank or below (`Layer::rank`).
//! * The Swarm's modules and the DeploymentPlan's modules do not import each other;
//!   what both need lives in a shared layer.
//!
//! A test rather than separate crates: the split that Cargo would enforce would move
//! every file (and the lead renames modules after merging parallel work), while this
//! table names module path prefixes and is edited in one place when a module moves.
//! Test code (`#[cfg(test)]` modules and files under a `tests` module) is not checked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where each module sits: module path prefix (as written after `crate::`) → layer. The
/// longest matching prefix wins; a module no prefix matches fails the test, so a new
/// module is classified when it is added. After a rename, edit the prefixes here.
const LAYERS: &[(&str, Layer)] = &[
    // The wire types of both kinds and what they share (status types, limits).
    ("api", Layer::Api),
    // Items of the crate root that are plain configuration.
    ("Settings", Layer::Api),
    ("LeaderElection", Layer::Api),
    // Plain data both kinds share: observed state, planned Events and conditions.
    ("observed", Layer::SharedData),
    ("planned", Layer::SharedData),
    ("managed_fields", Layer::SharedData),
    ("refusals", Layer::SharedData),
    // The Swarm's pure decision, and its observe/apply/reconcile.
    ("swarm", Layer::SwarmDecide),
    ("swarm::decide", Layer::SwarmDecide),
    ("swarm::fixtures", Layer::SwarmDecide),
    ("swarm::observe", Layer::SwarmIo),
    ("swarm::reconcile", Layer::SwarmIo),
    ("swarm::apply", Layer::SwarmIo),
    // The DeploymentPlan's pure decision, and its observe/apply/run.
    ("deployment_plan", Layer::PlanDecide),
    ("deployment_plan::decide", Layer::PlanDecide),
    ("deployment_plan::observe", Layer::PlanIo),
    ("deployment_plan::apply", Layer::PlanIo),
    ("deployment_plan::run", Layer::PlanIo),
    // The I/O both kinds share.
    ("cluster", Layer::SharedIo),
    ("events", Layer::SharedIo),
    ("eviction", Layer::SharedIo),
    ("lease_clock", Layer::SharedIo),
    ("metrics", Layer::SharedIo),
    ("approvers", Layer::SharedIo),
    // On top: the process, its servers, the plugin.
    ("", Layer::Top),
    ("runtime", Layer::Top),
    ("server", Layer::Top),
    ("status_api", Layer::Top),
    ("plugin", Layer::Top),
    ("main", Layer::Top),
    ("bin", Layer::Top),
];

/// A layer of the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    Api,
    SharedData,
    SwarmDecide,
    PlanDecide,
    SharedIo,
    SwarmIo,
    PlanIo,
    Top,
}

/// Which kind a layer belongs to, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Swarm,
    Plan,
}

impl Layer {
    /// A module may import modules of its own rank or below.
    fn rank(self) -> u8 {
        match self {
            Layer::Api => 0,
            Layer::SharedData => 1,
            Layer::SwarmDecide | Layer::PlanDecide => 2,
            Layer::SharedIo => 3,
            Layer::SwarmIo | Layer::PlanIo => 4,
            Layer::Top => 5,
        }
    }

    fn pure(self) -> bool {
        self.rank() <= 2
    }

    fn kind(self) -> Option<Kind> {
        match self {
            Layer::SwarmDecide | Layer::SwarmIo => Some(Kind::Swarm),
            Layer::PlanDecide | Layer::PlanIo => Some(Kind::Plan),
            _ => None,
        }
    }
}

/// The layer of a module path (`swarm::decide::gate`, `deployment_plan::observe::ObserveError`).
fn layer_of(path: &str) -> Option<Layer> {
    LAYERS
        .iter()
        .filter(|(prefix, _)| {
            path == *prefix
                || (!prefix.is_empty()
                    && path
                        .strip_prefix(prefix)
                        .is_some_and(|rest| rest.starts_with("::")))
        })
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, layer)| *layer)
}

/// The module path of a source file relative to `src` (`swarm/decide/gate.rs` →
/// `swarm::decide::gate`, `swarm/decide/mod.rs` → `swarm::decide`, `lib.rs` → the root).
fn module_of(relative: &Path) -> String {
    let mut segments: Vec<String> = relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = segments.pop() {
        let stem = last.trim_end_matches(".rs").to_owned();
        if stem != "mod" && stem != "lib" {
            segments.push(stem);
        }
    }
    segments.join("::")
}

/// Source text with comments, string and character literals blanked out, so that
/// neither a doc link nor a message naming a path counts as an import.
fn code_only(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &source[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            i += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |end| end + 2);
            i += end;
        } else if let Some(hashes) = raw_string_start(rest) {
            let closing = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            let end = rest[body..]
                .find(&closing)
                .map_or(rest.len(), |end| body + end + closing.len());
            out.push_str("\"\"");
            i += end;
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = (j + 1).min(bytes.len());
        } else if let Some(length) = char_literal(rest) {
            out.push_str("' '");
            i += length;
        } else {
            let next = rest.chars().next().map_or(1, char::len_utf8);
            out.push_str(&rest[..next]);
            i += next;
        }
    }
    out
}

/// `r"`, `r#"`, `br##"`…: the number of `#`.
fn raw_string_start(text: &str) -> Option<usize> {
    let text = text.strip_prefix('b').unwrap_or(text);
    let after_r = text.strip_prefix('r')?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    after_r[hashes..].starts_with('"').then_some(hashes)
}

/// The length of a character literal starting `text` (`'a'`, `'\n'`, `'{'`), not a lifetime.
fn char_literal(text: &str) -> Option<usize> {
    let body = text.strip_prefix('\'')?;
    let mut chars = body.char_indices();
    let (_, first) = chars.next()?;
    let after = if first == '\\' {
        let close = body[1..].find('\'')?;
        return Some(close + 3);
    } else {
        first.len_utf8()
    };
    body[after..].starts_with('\'').then_some(after + 2)
}

/// The code without `#[cfg(test)]` items (test modules and test helpers).
fn without_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        // The item ends at its `;` or at the brace closing its first `{`.
        let mut depth = 0usize;
        let mut end = item.len();
        for (offset, character) in item.char_indices() {
            match character {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = offset + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = offset + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The crate module paths a file refers to: `crate::a::b` (and each name of a
/// `crate::{a, b::c}` group), and `super::` paths resolved against the file's module.
fn referenced_paths(module: &str, code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let identifier = |text: &str| -> String {
        text.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect::<String>()
            .trim_end_matches(':')
            .to_owned()
    };
    for (at, _) in code.match_indices("crate::") {
        let preceded = code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if preceded {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            paths.extend(group_names(group).into_iter().filter(|name| name != "self"));
        } else {
            let path = identifier(rest);
            let path = match path.strip_suffix("::") {
                Some(trimmed) => trimmed.to_owned(),
                None => path,
            };
            if let Some(group) = rest[path.len()..].strip_prefix("::{") {
                paths.extend(group_names(group).into_iter().map(|name| {
                    if name == "self" {
                        path.clone()
                    } else {
                        format!("{path}::{name}")
                    }
                }));
            } else {
                paths.push(path);
            }
        }
    }
    for (at, _) in code.match_indices("super::") {
        let preceded = code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        if preceded {
            continue;
        }
        let mut base: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        let mut rest = &code[at..];
        while let Some(after) = rest.strip_prefix("super::") {
            base.pop();
            rest = after;
        }
        let mut targets = Vec::new();
        if let Some(group) = rest.strip_prefix('{') {
            targets.extend(
                group_names(group)
                    .into_iter()
                    .map(|name| if name == "self" { String::new() } else { name }),
            );
        } else {
            targets.push(identifier(rest));
        }
        for target in targets {
            let mut full = base.join("::");
            if !target.is_empty() && target != "*" {
                if !full.is_empty() {
                    full.push_str("::");
                }
                full.push_str(&target);
            }
            paths.push(full);
        }
    }
    paths
}

/// The first path segment of each entry of a `{a, b::c, d::{e}}` group (up to its `}`).
fn group_names(group: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut entry = String::new();
    for character in group.chars() {
        match character {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => names.push(std::mem::take(&mut entry)),
            _ => entry.push(character),
        }
    }
    names.push(entry);
    names
        .into_iter()
        .map(|entry| {
            entry
                .split("::")
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// What a pure module must not contain: (pattern, what it means).
const IMPURE: &[(&str, &str)] = &[
    ("async fn", "an async fn"),
    ("tokio", "tokio"),
    ("kube::Api", "kube::Api"),
    ("kube::Client", "kube::Client"),
    ("kube::api::", "kube::api"),
    ("kube::runtime", "kube::runtime"),
];

/// Every edge against the layering in `files` (module path → source text).
fn violations(files: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = Vec::new();
    for (module, source) in files {
        let Some(from) = layer_of(module) else {
            found.push(format!(
                "module `{module}` is in no layer: add its path to LAYERS"
            ));
            continue;
        };
        let code = without_tests(&code_only(source));
        if from.pure() {
            for (pattern, meaning) in IMPURE {
                if code.contains(pattern) {
                    found.push(format!("`{module}` ({from:?}) is pure but uses {meaning}"));
                }
            }
            if kube_use_names_io(&code) {
                found.push(format!(
                    "`{module}` ({from:?}) is pure but imports kube's Api or Client"
                ));
            }
        }
        for target in referenced_paths(module, &code) {
            if target == *module || target.starts_with(&format!("{module}::")) {
                continue;
            }
            let Some(to) = layer_of(&target) else {
                continue;
            };
            let edge = format!("`{module}` ({from:?}) imports `crate::{target}` ({to:?})");
            let crosses_kinds = from
                .kind()
                .zip(to.kind())
                .is_some_and(|(from, to)| from != to);
            let reason = if from.pure() && !to.pure() {
                Some("a pure module imports I/O")
            } else if crosses_kinds {
                Some("one kind imports the other's internals")
            } else if from.kind().is_none() && from != Layer::Top && to.kind().is_some() {
                Some("a shared module imports one kind's internals")
            } else if to.rank() > from.rank() {
                Some("a lower layer imports a higher one")
            } else {
                None
            };
            if let Some(reason) = reason {
                found.push(format!("{edge}: {reason}"));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// A `use kube::{...}` group naming `Api` or `Client`.
fn kube_use_names_io(code: &str) -> bool {
    code.match_indices("kube::{").any(|(at, _)| {
        group_names(&code[at + "kube::{".len()..])
            .iter()
            .any(|name| name == "Api" || name == "Client" || name == "api")
    })
}

/// Every `.rs` file under `dir`, by path relative to `root`.
fn sources(root: &Path, dir: &Path, into: &mut BTreeMap<String, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(root, &path, into);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let relative = path.strip_prefix(root).unwrap_or(&path);
            let module = module_of(relative);
            // Test modules (`tests.rs`, `tests/…`, `testing.rs`) are not checked.
            if module
                .split("::")
                .any(|segment| segment == "tests" || segment == "testing")
            {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(&path) {
                into.insert(module, text);
            }
        }
    }
}

#[test]
fn the_controller_imports_only_along_its_layers() {
    let root: PathBuf = [env!("CARGO_MANIFEST_DIR"), "src"].iter().collect();
    let mut files = BTreeMap::new();
    sources(&root, &root, &mut files);
    assert!(
        files.contains_key("swarm::decide") && files.contains_key("swarm::reconcile"),
        "the controller's sources were not found under {}",
        root.display()
    );
    let found = violations(&files);
    assert!(
        found.is_empty(),
        "{} edge(s) against the layering (see the table at the top of controller/tests/layering.rs):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn a_pure_module_importing_io_is_caught() {
    let files = BTreeMap::from([(
        "swarm::decide::gate".to_owned(),
        "use crate::swarm::reconcile::Context;\nuse kube::{Api, ResourceExt};\nasync fn read() {}\n"
            .to_owned(),
    )]);
    let found = violations(&files);
    assert!(
        found
            .iter()
            .any(|line| line.contains("a pure module imports I/O")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|line| line.contains("an async fn")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|line| line.contains("kube's Api or Client")),
        "{found:?}"
    );
}

#[test]
fn one_kind_importing_the_others_internals_is_caught() {
    let files = BTreeMap::from([
        (
            "deployment_plan::observe".to_owned(),
            "use crate::swarm::observe::{observe_pool, lease_state};".to_owned(),
        ),
        (
            "swarm::decide::instances".to_owned(),
            "fn f() { super::super::super::deployment_plan::decide::decide(); }".to_owned(),
        ),
    ]);
    let found = violations(&files);
    for module in ["`deployment_plan::observe`", "`swarm::decide::instances`"] {
        assert!(
            found.iter().any(|line| line.starts_with(module)
                && line.ends_with("one kind imports the other's internals")),
            "{module}: {found:?}"
        );
    }
}

#[test]
fn paths_in_comments_strings_and_tests_are_not_imports() {
    let files = BTreeMap::from([(
        "swarm::decide::gate".to_owned(),
        concat!(
            "/// See [`crate::swarm::observe::observe`].\n",
            "fn f() -> &'static str { \"crate::swarm::reconcile\" }\n",
            "#[cfg(test)]\nmod tests { use crate::swarm::reconcile::Context; fn g() { let c = '{'; } }\n",
            "use crate::api::swarm::Swarm;\n",
        )
        .to_owned(),
    )]);
    assert_eq!(violations(&files), Vec::<String>::new());
}

#[test]
fn super_paths_resolve_against_the_files_module() {
    let paths = referenced_paths(
        "deployment_plan::decide::pass",
        "use super::{members::deploy_members, PlanObservation};\nuse super::super::super::swarm::decide::x;",
    );
    assert_eq!(
        paths,
        [
            "deployment_plan::decide::members",
            "deployment_plan::decide::PlanObservation",
            "swarm::decide::x"
        ]
    );
}
