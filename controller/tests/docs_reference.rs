//! The book's reference pages generated from their sources: the CRD field pages from
//! the committed CRDs (`manifests/crd.yaml`, `manifests/crd-deploymentplan.yaml`, which
//! `crd_manifest.rs` holds equal to the code), and the command pages from the binaries'
//! own `--help`. Each test fails when the committed page differs from what it would
//! generate; regenerate the pages with
//! `SHOAL_WRITE_DOCS=1 cargo test -p shoal-controller --test integration docs_reference::`.

use crate::documents;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

const REGENERATE: &str =
    "SHOAL_WRITE_DOCS=1 cargo test -p shoal-controller --test integration docs_reference::";

/// Compares the committed page with the generated one, or writes it when
/// `SHOAL_WRITE_DOCS=1`.
fn check_page(relative: &str, generated: &str) {
    let path = documents::root().join(relative);
    if std::env::var("SHOAL_WRITE_DOCS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("create the folder");
        std::fs::write(&path, generated).unwrap_or_else(|error| panic!("{relative}: {error}"));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "{relative} is out of date (first difference at line {}); regenerate it with `{REGENERATE}`",
            first + 1
        );
    }
}

/// Text from a schema or a help text, made safe for Markdown prose: `<name>` would
/// otherwise be read as an HTML tag and vanish from the rendered page.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn number(value: &Value) -> String {
    match value.as_f64() {
        Some(n) if n.fract() == 0.0 && n.abs() < 1e15 => format!("{}", n as i64),
        _ => value.to_string(),
    }
}

/// The type of a schema in words: `string`, `integer (uint32)`, `list of string`,
/// `map of string to object`.
fn type_words(schema: &Value) -> String {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "integer or string".to_owned();
    }
    let base = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("any")
        .to_owned();
    let with_format = match schema.get("format").and_then(Value::as_str) {
        Some(format) => format!("{base} ({format})"),
        None => base.clone(),
    };
    match base.as_str() {
        "array" => format!(
            "list of {}",
            schema.get("items").map_or("any".to_owned(), type_words)
        ),
        "object" => match schema.get("additionalProperties") {
            Some(values) if values.is_object() => {
                format!("map of string to {}", type_words(values))
            }
            _ => "object".to_owned(),
        },
        _ => with_format,
    }
}

/// The facts of one field after its type: required, default, values, bounds, rules.
fn facts(schema: &Value, required: bool) -> Vec<String> {
    let mut facts = vec![format!("`{}`", type_words(schema))];
    if required {
        facts.push("required".to_owned());
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .map(|value| match value.as_str() {
                Some(text) => format!("`{text}`"),
                None => format!("`{value}`"),
            })
            .collect();
        facts.push(format!("one of {}", values.join(", ")));
    }
    if let Some(default) = schema.get("default") {
        facts.push(format!("default `{default}`"));
    }
    for (key, words) in [
        ("minimum", "at least"),
        ("maximum", "at most"),
        ("minLength", "length at least"),
        ("maxLength", "length at most"),
        ("minItems", "items at least"),
        ("maxItems", "items at most"),
        ("minProperties", "entries at least"),
        ("maxProperties", "entries at most"),
    ] {
        if let Some(bound) = schema.get(key) {
            facts.push(format!("{words} {}", number(bound)));
        }
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        facts.push(format!("matches `{pattern}`"));
    }
    if let Some(list_type) = schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        facts.push(format!("list type `{list_type}`"));
    }
    if schema.get("nullable") == Some(&Value::Bool(true)) {
        facts.push("nullable".to_owned());
    }
    facts
}

/// Appends the section of the field at `path` and of every field below it.
fn field_sections(out: &mut String, path: &str, schema: &Value, required: bool) {
    let _ = writeln!(out, "### `{path}`\n");
    let _ = writeln!(out, "{}.\n", facts(schema, required).join(", "));
    if let Some(description) = schema.get("description").and_then(Value::as_str) {
        let _ = writeln!(out, "{}\n", escape(description.trim()));
    }
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        let _ = writeln!(out, "Checked when applied:\n");
        for rule in rules {
            let message = rule
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let expression = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
            let _ = writeln!(
                out,
                "- {} (`{}`)",
                escape(message),
                expression.replace('`', "'")
            );
        }
        out.push('\n');
    }
    children(out, path, schema);
}

/// The fields below `schema`: its properties, its items' and its map values'.
fn children(out: &mut String, path: &str, schema: &Value) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, property) in properties {
            field_sections(
                out,
                &format!("{path}.{name}"),
                property,
                required.contains(&name.as_str()),
            );
        }
    }
    if let Some(items) = schema.get("items") {
        children(out, &format!("{path}[]"), items);
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        children(out, &format!("{path}.<key>"), values);
    }
}

/// The field reference page of the CRD in `manifest` (relative to the root).
fn crd_page(manifest: &str) -> String {
    let text = documents::read(Path::new(manifest));
    let crd: Value =
        serde_saphyr::from_str(&text).unwrap_or_else(|error| panic!("{manifest}: {error}"));
    let names = &crd["spec"]["names"];
    let kind = names["kind"].as_str().expect("a kind");
    let group = crd["spec"]["group"].as_str().expect("a group");
    let version = &crd["spec"]["versions"][0];
    let version_name = version["name"].as_str().expect("a version");
    let short_names: Vec<String> = names["shortNames"]
        .as_array()
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(|name| format!("`{name}`"))
                .collect()
        })
        .unwrap_or_default();
    let schema = &version["schema"]["openAPIV3Schema"];
    let mut out = String::new();
    let _ = writeln!(out, "# {kind} fields\n");
    let _ = writeln!(
        out,
        "<!-- Generated from {manifest} by controller/tests/docs_reference.rs; do not edit.\n     Regenerate: {REGENERATE} -->\n"
    );
    let _ = writeln!(
        out,
        "`{group}/{version_name}`, kind `{kind}`, plural `{}`, short names {}. \
         Generated from the CRD's schema (`{manifest}`), as `kubectl explain {}` shows it.\n",
        names["plural"].as_str().unwrap_or_default(),
        short_names.join(", "),
        names["singular"].as_str().unwrap_or_default(),
    );
    if let Some(description) = schema.get("description").and_then(Value::as_str) {
        let _ = writeln!(out, "{}\n", escape(description.trim()));
    }
    if let Some(columns) = version["additionalPrinterColumns"].as_array() {
        let _ = writeln!(out, "## Columns of `kubectl get`\n");
        let _ = writeln!(out, "| column | from | meaning |\n| --- | --- | --- |");
        for column in columns {
            let _ = writeln!(
                out,
                "| {} | `{}` | {} |",
                column["name"].as_str().unwrap_or_default(),
                column["jsonPath"].as_str().unwrap_or_default(),
                escape(column["description"].as_str().unwrap_or_default()),
            );
        }
        out.push('\n');
    }
    for part in ["spec", "status"] {
        if let Some(part_schema) = schema["properties"].get(part) {
            let _ = writeln!(out, "## {part}\n");
            if let Some(description) = part_schema.get("description").and_then(Value::as_str) {
                let _ = writeln!(out, "{}\n", escape(description.trim()));
            }
            children(&mut out, part, part_schema);
        }
    }
    format!("{}\n", out.trim_end())
}

/// A help text without what depends on the machine it runs on: clap shows the value of
/// a flag's environment variable when it is set (`[env: SHOAL_NAMESPACE=demo]`).
fn normalize_help(help: &str) -> String {
    let mut out = String::new();
    let mut rest = help;
    while let Some(start) = rest.find("[env: ") {
        let (before, from) = rest.split_at(start);
        out.push_str(before);
        let Some(end) = from.find(']') else {
            rest = from;
            break;
        };
        let name = from["[env: ".len()..end]
            .split('=')
            .next()
            .unwrap_or_default();
        out.push_str(&format!("[env: {name}=]"));
        rest = &from[end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn a_help_text_is_the_same_whatever_the_environment_holds() {
    assert_eq!(
        normalize_help("--namespace <N>  Watch [env: SHOAL_NAMESPACE=demo] [default: x]\n"),
        "--namespace <N>  Watch [env: SHOAL_NAMESPACE=] [default: x]\n"
    );
}

/// What `binary args` prints.
fn run_help(binary: &str, args: &[&str]) -> String {
    let output = Command::new(binary)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("running {binary} {args:?}: {error}"));
    assert!(output.status.success(), "{binary} {args:?} failed");
    normalize_help(&String::from_utf8_lossy(&output.stdout))
}

/// The subcommands listed under `Commands:` in a clap help text.
fn subcommands(help: &str) -> Vec<String> {
    help.split("Commands:\n")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// A command page: a section per command, its help text verbatim.
fn command_page(title: &str, intro: &str, sections: &[(String, String)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {title}\n");
    let _ = writeln!(
        out,
        "<!-- Generated by controller/tests/docs_reference.rs; do not edit.\n     Regenerate: {REGENERATE} -->\n"
    );
    let _ = writeln!(out, "{intro}\n");
    for (heading, help) in sections {
        let _ = writeln!(out, "## {heading}\n\n```text\n{}\n```\n", help.trim_end());
    }
    format!("{}\n", out.trim_end())
}

/// The help of a binary and of each of its subcommands, as (`<name> <command>`, text).
fn help_sections(binary: &str, name: &str) -> Vec<(String, String)> {
    let top = run_help(binary, &["--help"]);
    let mut sections = vec![(name.to_owned(), top.clone())];
    for command in subcommands(&top) {
        let help = run_help(binary, &[&command, "--help"]);
        sections.push((format!("{name} {command}"), help));
    }
    sections
}

#[test]
fn the_swarm_field_reference_matches_the_crd() {
    let page = crd_page("manifests/crd.yaml");
    assert!(page.contains("### `spec.strategy.type`"), "{page}");
    check_page("docs/src/reference/crd/swarm.md", &page);
}

#[test]
fn the_deployment_plan_field_reference_matches_the_crd() {
    let page = crd_page("manifests/crd-deploymentplan.yaml");
    assert!(page.contains("### `spec.swarm`"), "{page}");
    check_page("docs/src/reference/crd/deploymentplan.md", &page);
}

#[test]
fn the_plugin_reference_matches_its_help() {
    let sections = help_sections(env!("CARGO_BIN_EXE_kubectl-shoal"), "kubectl shoal");
    assert!(
        sections
            .iter()
            .any(|(heading, _)| heading == "kubectl shoal diff"),
        "{sections:?}"
    );
    let page = command_page(
        "kubectl shoal",
        "The plugin's own help, command by command (`kubectl shoal <command> --help`). \
         How to install it and the commands at a glance: \
         [Install and use the plugin](../../how-to/plugin.md).",
        &sections,
    );
    check_page("docs/src/reference/cli/kubectl-shoal.md", &page);
}

#[test]
fn the_controller_reference_matches_its_help() {
    let sections = help_sections(env!("CARGO_BIN_EXE_shoal-controller"), "shoal-controller");
    assert!(sections[0].1.contains("--namespace"), "{sections:?}");
    let page = command_page(
        "shoal-controller",
        "The controller's own help (`shoal-controller --help`). Every flag also reads the \
         environment variable named beside it. What the flags are for: \
         [Configuration](../configuration.md).",
        &sections,
    );
    check_page("docs/src/reference/cli/shoal-controller.md", &page);
}

#[test]
fn the_sidecar_reference_matches_its_help() {
    use clap::CommandFactory;
    let help = normalize_help(
        &shoal_worker::Settings::command()
            .render_long_help()
            .to_string(),
    );
    assert!(
        help.contains("--pod-name"),
        "not the sidecar's help:\n{help}"
    );
    let page = command_page(
        "shoal-worker",
        "The sidecar's own help (`shoal-worker --help`). Every flag also reads the \
         environment variable named beside it. How an application uses the sidecar: \
         [Write a worker](../../how-to/worker.md).",
        &[("shoal-worker".to_owned(), help)],
    );
    check_page("docs/src/reference/cli/shoal-worker.md", &page);
}
