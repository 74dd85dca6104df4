//! The README and the book under `docs/` hold together: every relative link and anchor
//! resolves, every page is in the book's summary, and what the pages tell users to type
//! exists (`kubectl shoal` subcommands, cargo packages, test and bench targets; Event and
//! condition reasons the controller really emits).

use crate::documents;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use documents::{book_pages, documents, normalize, read, read_rendered, root};

/// The text of `markdown` outside fenced code blocks, with inline code spans blanked
/// (a link inside code is an example, not a link).
fn prose(markdown: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced {
            out.push('\n');
            continue;
        }
        let mut in_code = false;
        for character in line.chars() {
            if character == '`' {
                in_code = !in_code;
                out.push(' ');
            } else {
                out.push(if in_code { ' ' } else { character });
            }
        }
        out.push('\n');
    }
    out
}

/// The targets of the inline links `[text](target)` in `markdown`'s prose, each with its line.
fn links(markdown: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (index, line) in prose(markdown).lines().enumerate() {
        let mut rest = line;
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            found.push((index + 1, after[..end].trim().to_owned()));
            rest = &after[end + 1..];
        }
    }
    found
}

/// The anchor mdbook and GitHub give a heading: lower case, spaces to `-`, and
/// everything but letters, digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of the headings of `markdown` (outside code blocks).
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut found = BTreeSet::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.insert(slug(line.trim_start_matches('#')));
        }
    }
    found
}

fn is_external(target: &str) -> bool {
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|scheme| target.starts_with(scheme))
}

/// What is wrong with the link `target` in `document` (relative to the root), if anything.
/// A page of the book may link only within the book (the rendered site holds nothing
/// else); the README may link anywhere in the repository.
fn broken_link(document: &Path, target: &str) -> Option<String> {
    if is_external(target) {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let linked = if path.is_empty() {
        document.to_path_buf()
    } else {
        normalize(&document.parent().unwrap_or(Path::new("")).join(path))
    };
    if linked.starts_with("..") || !root().join(&linked).exists() {
        return Some(format!("{} does not exist", linked.display()));
    }
    if document.starts_with("docs/src") && !linked.starts_with("docs/src") {
        return Some(format!(
            "{} is outside the book: name it as code (`{}`) or include it in a page",
            linked.display(),
            linked.display()
        ));
    }
    if let Some(anchor) = anchor {
        if linked.extension().is_none_or(|ext| ext != "md") {
            return Some(format!("{} is not a page with headings", linked.display()));
        }
        if !anchors(&read_rendered(&linked)).contains(anchor) {
            return Some(format!("{} has no heading #{anchor}", linked.display()));
        }
    }
    None
}

#[test]
fn the_link_checker_finds_missing_pages_missing_anchors_and_links_out_of_the_book() {
    let page = Path::new("docs/src/concepts/strategies.md");
    assert_eq!(broken_link(page, "../tutorials/sandbox-tour.md"), None);
    assert_eq!(
        broken_link(page, "../contributing/benchmarks.md#the-assignment-core"),
        None
    );
    assert_eq!(broken_link(page, "#which-to-pick"), None);
    assert_eq!(broken_link(page, "https://example.com/x.md"), None);
    assert!(broken_link(page, "../tutorials/no-such-page.md").is_some());
    assert!(broken_link(page, "#no-such-heading").is_some());
    assert!(broken_link(page, "../../../worker/README.md").is_some());
    assert!(broken_link(Path::new("README.md"), "worker/README.md").is_none());
    assert_eq!(
        links("see [a](x.md#y) and `[not](a link)`\n```\n[nor](this)\n```\n"),
        vec![(1, "x.md#y".to_owned())]
    );
    assert_eq!(
        slug(" Swarm restarts pool by pool (`reload: Restart`)"),
        "swarm-restarts-pool-by-pool-reload-restart"
    );
}

#[test]
fn every_relative_link_and_anchor_in_the_readme_and_the_book_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for document in documents() {
        for (line, target) in links(&read(&document)) {
            checked += 1;
            if let Some(problem) = broken_link(&document, &target) {
                broken.push(format!(
                    "{}:{line}: ({target}): {problem}",
                    document.display()
                ));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let summary = Path::new("docs/src/SUMMARY.md");
    let listed: BTreeSet<PathBuf> = links(&read(summary))
        .into_iter()
        .map(|(_, target)| normalize(&Path::new("docs/src").join(target)))
        .collect();
    let missing: Vec<String> = book_pages()
        .into_iter()
        .filter(|page| page != summary && !listed.contains(page))
        .map(|page| page.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "pages the summary does not list (mdbook would not render them): {missing:?}"
    );
}

/// The subcommands `kubectl-shoal --help` lists.
fn plugin_subcommands() -> BTreeSet<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_kubectl-shoal"))
        .arg("--help")
        .output()
        .expect("kubectl-shoal runs");
    let help = String::from_utf8_lossy(&output.stdout).into_owned();
    help.split("Commands:\n")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The words following `prefix` in `text` (each up to the first character that cannot
/// be in a command name), with the line each is on.
fn words_after(text: &str, prefix: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        for (at, _) in line.match_indices(prefix) {
            let word: String = line[at + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            if !word.is_empty() && !word.starts_with('-') {
                found.push((index + 1, word));
            }
        }
    }
    found
}

#[test]
fn every_kubectl_shoal_command_the_documents_name_exists() {
    let commands = plugin_subcommands();
    assert!(
        commands.contains("diff"),
        "not the plugin's help: {commands:?}"
    );
    let mut unknown = Vec::new();
    let mut seen = 0;
    for document in documents() {
        for (line, word) in words_after(&read(&document), "kubectl shoal ") {
            seen += 1;
            if !commands.contains(&word) {
                unknown.push(format!(
                    "{}:{line}: kubectl shoal {word}",
                    document.display()
                ));
            }
        }
    }
    assert!(seen > 20, "only {seen} plugin commands found");
    assert!(
        unknown.is_empty(),
        "commands the plugin does not have ({commands:?}):\n{}",
        unknown.join("\n")
    );
}

/// The workspace's packages, each with its directory.
fn packages() -> Vec<(String, PathBuf)> {
    let manifest = read(Path::new("Cargo.toml"));
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("a members list in Cargo.toml");
    members
        .split(',')
        .map(|member| member.trim().trim_matches('"'))
        .filter(|member| !member.is_empty())
        .map(|member| {
            let dir = PathBuf::from(member);
            let text = read(&dir.join("Cargo.toml"));
            let name = text
                .lines()
                .find_map(|line| line.strip_prefix("name = "))
                .map(|name| name.trim().trim_matches('"').to_owned())
                .unwrap_or_else(|| panic!("{member}/Cargo.toml names no package"));
            (name, dir)
        })
        .collect()
}

/// What is wrong with the cargo command line `line` (from `cargo ` on), if anything:
/// a package `-p` that is not in the workspace, or a `--test`/`--bench` target it lacks.
fn unknown_cargo_target(line: &str, packages: &[(String, PathBuf)]) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |flag: &str| {
        words
            .iter()
            .position(|word| *word == flag)
            .and_then(|at| words.get(at + 1))
            .map(|word| word.trim_matches(|c| "`,;:.)".contains(c)))
    };
    let package = after("-p").filter(|package| !package.starts_with('<'))?;
    let Some((_, dir)) = packages.iter().find(|(name, _)| name == package) else {
        return Some(format!("no package {package}"));
    };
    for (flag, folder) in [("--test", "tests"), ("--bench", "benches")] {
        if let Some(target) = after(flag) {
            let file = dir.join(folder).join(format!("{target}.rs"));
            if !root().join(&file).is_file() {
                return Some(format!(
                    "{package} has no {flag} {target} ({})",
                    file.display()
                ));
            }
            if flag == "--test" && !is_test_target(&read(&dir.join("Cargo.toml")), target) {
                return Some(format!(
                    "{package} has no --test {target}: {} is a module of one of its test targets",
                    file.display()
                ));
            }
        }
    }
    None
}

/// Whether the manifest `cargo_toml` makes `tests/{target}.rs` a test target of its
/// own: every file there is one, unless `autotests = false` leaves only those a
/// `[[test]]` names (a package whose tests are modules of one binary).
fn is_test_target(cargo_toml: &str, target: &str) -> bool {
    let lines: Vec<&str> = cargo_toml.lines().map(str::trim).collect();
    if !lines.contains(&"autotests = false") {
        return true;
    }
    lines
        .windows(2)
        .any(|pair| pair[0] == "[[test]]" && pair[1] == format!("name = \"{target}\""))
}

#[test]
fn the_cargo_command_checker_knows_packages_and_targets() {
    let packages = packages();
    assert!(packages.iter().any(|(name, _)| name == "shoal-sandbox"));
    assert_eq!(
        unknown_cargo_target("cargo test -p shoal-sandbox --test manifests", &packages),
        None
    );
    assert_eq!(
        unknown_cargo_target("(`cargo run -p shoal-sandbox`; its tour", &packages),
        None
    );
    assert_eq!(
        unknown_cargo_target("cargo test -p <package>", &packages),
        None
    );
    assert!(unknown_cargo_target("cargo run -p shoal-nothing", &packages).is_some());
    assert!(
        unknown_cargo_target("cargo test -p shoal-controller --test nothing", &packages).is_some()
    );
    // A file that is a module of the one test binary is no target of its own.
    assert!(
        unknown_cargo_target(
            "cargo test -p shoal-controller --test cluster_basics",
            &packages
        )
        .is_some()
    );
    assert_eq!(
        unknown_cargo_target(
            "cargo test -p shoal-controller --test integration cluster_basics::",
            &packages
        ),
        None
    );
    assert!(unknown_cargo_target("cargo bench -p shoal-core --bench nothing", &packages).is_some());
}

#[test]
fn every_cargo_package_test_and_bench_the_documents_name_exists() {
    let packages = packages();
    let mut wrong = Vec::new();
    let mut seen = 0;
    for document in documents() {
        for (index, line) in read(&document).lines().enumerate() {
            for (at, _) in line.match_indices("cargo ") {
                let command = &line[at..];
                if !command.contains(" -p ") {
                    continue;
                }
                seen += 1;
                if let Some(problem) = unknown_cargo_target(command, &packages) {
                    wrong.push(format!("{}:{}: {problem}", document.display(), index + 1));
                }
            }
        }
    }
    assert!(seen > 10, "only {seen} cargo commands found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The reasons the Events and conditions page names: every word in backticks that is
/// one CamelCase identifier (fields, commands and metric names are not).
fn documented_reasons() -> BTreeSet<String> {
    let page = read(Path::new("docs/src/reference/events-conditions.md"));
    page.lines()
        .flat_map(|line| {
            line.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|word| {
            word.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && word.chars().all(|c| c.is_ascii_alphanumeric())
        })
        .collect()
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("a source directory")
            .filter_map(Result::ok)
        {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn every_event_and_condition_reason_the_reference_names_is_one_the_controller_emits() {
    let reasons = documented_reasons();
    assert!(reasons.contains("RevisionPending"), "{reasons:?}");
    let source: String = sources(&root().join("controller/src"))
        .iter()
        .map(|file| std::fs::read_to_string(file).expect("readable source"))
        .collect();
    let unknown: Vec<&String> = reasons
        .iter()
        .filter(|reason| !source.contains(&format!("\"{reason}\"")))
        .collect();
    assert!(
        unknown.is_empty(),
        "docs/src/reference/events-conditions.md names reasons no controller source holds: \
         {unknown:?}"
    );
}

#[test]
fn every_include_in_the_book_names_a_file_that_exists() {
    let mut includes = 0;
    let mut missing = Vec::new();
    for page in book_pages() {
        for line in read(&page).lines() {
            if let Some(included) = documents::included_path(line) {
                includes += 1;
                let path = normalize(&page.parent().unwrap_or(Path::new("")).join(included));
                if path.starts_with("..") || !root().join(&path).is_file() {
                    missing.push(format!("{}: {line}", page.display()));
                }
            }
        }
    }
    assert!(includes >= 1, "the design page includes ARCHITECTURE.md");
    assert!(
        missing.is_empty(),
        "includes of missing files:\n{}",
        missing.join("\n")
    );
}
