//! The project carries its own copy of the golden vectors (`tests/vectors/`); when the shared
//! folder `../shared/vectors` exists beside the project, the copy must equal it byte for byte.

mod support;

use std::collections::BTreeMap;
use std::path::Path;

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("read {}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| (path.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&path).unwrap()))
        .collect()
}

#[test]
fn the_project_copy_holds_every_vector_file() {
    let copy = files(&support::vectors_dir());
    for expected in [
        "canonical.json",
        "cluster-ingress-designation.json",
        "cluster-ingress-registration.json",
        "runtime-local-storage-claim.json",
        "runtime-network-projection.json",
        "signatures.json",
    ] {
        assert!(copy.contains_key(expected), "tests/vectors/{expected} is missing");
    }
}

#[test]
fn the_project_copy_equals_the_shared_vectors_when_present() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("shared").join("vectors");
    if !shared.is_dir() {
        // Outside the workplace there is no shared folder; the copy is then the only truth.
        return;
    }
    let shared = files(&shared);
    let copy = files(&support::vectors_dir());
    assert_eq!(shared.keys().collect::<Vec<_>>(), copy.keys().collect::<Vec<_>>(), "file lists differ");
    for (name, bytes) in &shared {
        assert!(copy[name] == *bytes, "tests/vectors/{name} differs from ../shared/vectors/{name}: copy it again");
    }
}
