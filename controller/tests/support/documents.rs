//! The documents Shoal's users read: the README and every page of the book under
//! `docs/src/`. Shared by the tests that check them (included with `#[path]`, so one
//! definition serves every test crate that reads the documents).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The repository root: the first ancestor of this crate holding `docs/book.toml`.
pub fn root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .ancestors()
        .find(|dir| dir.join("docs/book.toml").is_file())
        .unwrap_or_else(|| panic!("no docs/book.toml above {}", manifest_dir.display()))
        .to_path_buf()
}

/// Every page of the book (`docs/src/**/*.md`), relative to the root, sorted.
pub fn book_pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = Vec::new();
    let mut pending = vec![root.join("docs/src")];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                let relative = path.strip_prefix(&root).expect("under the root");
                pages.push(relative.to_path_buf());
            }
        }
    }
    pages.sort();
    pages
}

/// The README and every page of the book, relative to the root.
pub fn documents() -> Vec<PathBuf> {
    let mut documents = vec![PathBuf::from("README.md")];
    documents.extend(book_pages());
    documents
}

/// Whether a document is written for engineers working on Shoal (the book's
/// contributing chapter) rather than for its users.
pub fn is_for_contributors(document: &Path) -> bool {
    document.starts_with("docs/src/contributing")
}

/// The documents written for users: the README and the book outside its
/// contributing chapter.
pub fn user_documents() -> Vec<PathBuf> {
    documents()
        .into_iter()
        .filter(|document| !is_for_contributors(document))
        .collect()
}

/// A document's text, `relative` to the root.
pub fn read(relative: &Path) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// A document's text with every `{{#include <path>}}` line replaced by the file it
/// names (relative to the document), as mdbook renders it.
pub fn read_rendered(relative: &Path) -> String {
    let text = read(relative);
    let dir = relative.parent().unwrap_or(Path::new(""));
    text.lines()
        .map(|line| match included_path(line) {
            Some(included) => read(&normalize(&dir.join(included))),
            None => format!("{line}\n"),
        })
        .collect()
}

/// The path of an `{{#include <path>}}` line.
pub fn included_path(line: &str) -> Option<&str> {
    line.trim()
        .strip_prefix("{{#include ")?
        .strip_suffix("}}")
        .map(str::trim)
}

/// `path` with `.` and `..` resolved lexically (`docs/src/a/../b.md` → `docs/src/b.md`);
/// `None` components above the start are kept as `..`.
pub fn normalize(path: &Path) -> PathBuf {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if parts.last().is_some_and(|last| *last != "..") {
                    parts.pop();
                } else {
                    parts.push(std::ffi::OsStr::new(".."));
                }
            }
            other => parts.push(other.as_os_str()),
        }
    }
    parts.iter().collect()
}

/// The bodies of the fenced code blocks of `text` whose info string starts with `language`.
pub fn code_blocks<'a>(text: &'a str, language: &str) -> Vec<&'a str> {
    let opening = format!("```{language}\n");
    text.split(opening.as_str())
        .skip(1)
        .map(|block| block.split("```").next().unwrap_or_default())
        .collect()
}
