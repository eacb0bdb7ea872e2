//! The settings table (`openvia_core::settings`) against what reads and
//! describes the settings: the generated docs page and man page must be
//! exactly what the table gives, and the source tree may read or mention
//! no `OPENVIA_*` variable the table lacks, nor the table list one that
//! nothing reads.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use openvia_core::settings::{self, SETTINGS};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const REGENERATE: &str =
    "regenerate with: cargo run -p viainfo -- --settings-doc markdown > docs/settings.md; \
     cargo run -p viainfo -- --settings-doc man > docs/man/openvia-settings.7";

#[test]
fn docs_page_is_the_table() {
    let page = std::fs::read_to_string(root().join("docs/settings.md")).unwrap();
    assert!(
        page == settings::markdown(),
        "docs/settings.md differs from the table; {REGENERATE}"
    );
    for s in SETTINGS {
        assert!(page.contains(&format!("`{}`", s.name)));
    }
}

#[test]
fn man_page_is_the_table() {
    let page = std::fs::read_to_string(root().join("docs/man/openvia-settings.7")).unwrap();
    assert!(
        page == settings::man_page(env!("CARGO_PKG_VERSION")),
        "docs/man/openvia-settings.7 differs from the table; {REGENERATE}"
    );
}

/// Files of the project that could read or document a setting.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !(name.starts_with("target")
                || name.starts_with('.')
                || name == "dist"
                || name == "report"
                || name == "build")
            {
                sources(&p, out);
            }
        } else if [".rs", ".py", ".sh", ".c", ".h", ".md", ".toml"]
            .iter()
            .any(|x| name.ends_with(x))
            || name == "Makefile"
            || p.parent()
                .is_some_and(|d| d.ends_with("scripts") || d.ends_with("man"))
        {
            out.push(p);
        }
    }
}

/// Every `OPENVIA_[A-Z0-9_]*` word in `text`.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(k) = text[i..].find("OPENVIA_") {
        let start = i + k;
        let mut end = start + "OPENVIA_".len();
        while end < b.len()
            && (b[end].is_ascii_uppercase() || b[end].is_ascii_digit() || b[end] == b'_')
        {
            end += 1;
        }
        let before_ok =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        if before_ok {
            out.push(text[start..end].trim_end_matches('_').to_string());
        }
        i = end;
    }
    out
}

#[test]
fn the_tree_reads_only_settings_of_the_table() {
    let mut files = Vec::new();
    sources(&root(), &mut files);
    let table: BTreeSet<&str> = SETTINGS.iter().map(|s| s.name).collect();
    let mut unknown = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let generated = f.ends_with("crates/core/src/settings.rs")
            || f.ends_with("docs/settings.md")
            || f.ends_with("openvia-settings.7");
        for w in words(&text) {
            if table.contains(w.as_str()) {
                if !generated {
                    seen.insert(w);
                }
            } else if !table.iter().any(|t| t.starts_with(&format!("{w}_")))
                && w != "OPENVIA"
                && !w.ends_with("_H")
            {
                // A prefix (`OPENVIA_PVM` as a filter) is not a setting,
                // nor a header's include guard.
                unknown.insert(format!("{w} in {}", f.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "settings missing from crates/core/src/settings.rs: {unknown:?}"
    );
    let unread: Vec<_> = table.iter().filter(|t| !seen.contains(**t)).collect();
    assert!(
        unread.is_empty(),
        "settings in the table that nothing reads: {unread:?}"
    );
}
