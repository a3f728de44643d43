//! The kit is test support: no crate of the workspace may depend on it outside
//! `[dev-dependencies]`, so nothing shipped carries it (or its fakes) along.

use std::path::Path;

#[test]
fn no_crate_depends_on_the_kit_except_for_its_tests() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the kit lives in crates/");
    let mut manifests = 0;
    for entry in std::fs::read_dir(crates).expect("read crates/") {
        let manifest = entry.expect("a directory entry").path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        manifests += 1;
        let doc: toml::Table = toml::from_str(&text).expect("a manifest parses");
        let targets = doc.get("target").and_then(|t| t.as_table());
        let tables = std::iter::once(("", &doc)).chain(
            targets
                .into_iter()
                .flatten()
                .filter_map(|(cfg, t)| Some((cfg.as_str(), t.as_table()?))),
        );
        for (cfg, table) in tables {
            for section in ["dependencies", "build-dependencies"] {
                let deps = table.get(section).and_then(|d| d.as_table());
                let place = match cfg {
                    "" => section.to_owned(),
                    cfg => format!("target.{cfg}.{section}"),
                };
                assert!(
                    !deps.is_some_and(|d| d.contains_key("redrive-testkit")),
                    "{}: redrive-testkit under [{place}]; it belongs under [dev-dependencies]",
                    manifest.display(),
                );
            }
        }
    }
    assert!(manifests > 10, "found only {manifests} crates");
}
