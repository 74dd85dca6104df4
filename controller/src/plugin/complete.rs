//! Completion of `kubectl shoal …` by kubectl itself. kubectl (1.26 and later)
//! completes a plugin's arguments by running `kubectl_complete-<plugin>` from the
//! `PATH` with the words after the plugin's name and the word being completed
//! last, and reads one candidate per line and a closing `:<directive>` line
//! (cobra's protocol). `kubectl-shoal` answers when it is run under that name
//! (a link to the one binary), from the same command-line definition as `--help`.

use clap::{Command, CommandFactory};

use super::Cli;

/// The name kubectl runs for completions of `kubectl shoal`.
pub const COMPLETION_BINARY: &str = "kubectl_complete-shoal";

/// cobra's `ShellCompDirectiveNoFileComp`: offer no file names instead.
const NO_FILE_COMPLETION: &str = ":4";

/// The candidates for the last of `words` (the words after `kubectl shoal`), one per
/// line, then the directive line.
pub fn kubectl_complete(words: &[String]) -> String {
    let (partial, before) = words
        .split_last()
        .map_or(("", &[][..]), |(last, rest)| (last.as_str(), rest));
    let root = Cli::command();
    let command = before
        .iter()
        .try_fold(&root, |command, word| {
            Some(command.find_subcommand(word).unwrap_or(command))
        })
        .unwrap_or(&root);
    let mut out = String::new();
    for candidate in candidates(command, &root, before.last().map(String::as_str), partial) {
        out.push_str(&candidate);
        out.push('\n');
    }
    out.push_str(NO_FILE_COMPLETION);
    out.push('\n');
    out
}

/// A flag's values after it, a command's and the global flags after `-`, else its
/// subcommands; object names are not looked up (that would need the cluster).
fn candidates(
    command: &Command,
    root: &Command,
    previous: Option<&str>,
    partial: &str,
) -> Vec<String> {
    let flags = || {
        command
            .get_arguments()
            .chain(root.get_arguments().filter(|arg| arg.is_global_set()))
    };
    if let Some(flag) = previous.and_then(|word| flags().find(|arg| is_flag(arg, word))) {
        return flag
            .get_possible_values()
            .iter()
            .map(|value| value.get_name().to_owned())
            .filter(|value| value.starts_with(partial))
            .collect();
    }
    if partial.starts_with('-') {
        return flags()
            .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
            .filter(|flag| flag.starts_with(partial))
            .collect();
    }
    command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .filter(|name| name.starts_with(partial) && name != "help")
        .collect()
}

fn is_flag(arg: &clap::Arg, word: &str) -> bool {
    let long = arg
        .get_long()
        .is_some_and(|long| word.strip_prefix("--") == Some(long));
    let short = arg
        .get_short()
        .is_some_and(|short| word == format!("-{short}"));
    (long || short) && arg.get_action().takes_values()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(words: &[&str]) -> Vec<String> {
        let words: Vec<String> = words.iter().map(|word| (*word).to_owned()).collect();
        kubectl_complete(&words)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn commands_flags_and_flag_values_complete_and_files_never_do() {
        assert_eq!(complete(&["st"]), ["status", "stop", "start", ":4"]);
        assert!(complete(&["status", "--w"]).contains(&"--watch".to_owned()));
        assert!(complete(&["status", "demo", "--n"]).contains(&"--namespace".to_owned()));
        assert_eq!(complete(&["status", "-o", "y"]), ["yaml", ":4"]);
        assert_eq!(complete(&[]), complete(&[""]));
    }
}
