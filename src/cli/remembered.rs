//! The designation requests `cloudly ingress designate` sent, kept so that the same
//! `--mutation-id` resends the identical request and the controller answers it as a replay.
//!
//! A designation request carries what the CLI read before sending (the cluster's runtime, the
//! service's spec revision, the current designation); read again after a success they differ, and
//! a request built anew would be answered `mutation-conflict`. So each request is written, before
//! it is sent, to `<state dir>/designations/<sha256 of controller URL, cluster, service and
//! mutation id>.json` (directory mode 0700, file mode 0600; the request holds no identity and no
//! secret), and a later `designate` with the same controller, cluster, service and mutation id
//! sends that file's request. The state directory is `$CLOUDLY_STATE_DIR`, else
//! `$XDG_STATE_HOME/cloudly`, else `~/.local/state/cloudly`.

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use std::path::{Path, PathBuf};

/// Where designation requests are remembered.
pub struct RememberedDesignations {
    directory: Option<PathBuf>,
}

/// What one remembered request is about.
pub struct DesignationKey<'a> {
    /// The controller's base URL as given.
    pub url: &'a str,
    /// The cluster.
    pub cluster: &'a str,
    /// The ingress service.
    pub service: &'a str,
    /// The mutation id.
    pub mutation_id: &'a str,
}

impl DesignationKey<'_> {
    fn file_name(&self) -> String {
        let mut hasher = Sha256::new();
        for part in [self.url.trim_end_matches('/'), self.cluster, self.service, self.mutation_id] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        format!("{}.json", hex::encode(hasher.finalize()))
    }
}

impl RememberedDesignations {
    /// The directory named by the environment (see the module's documentation); `None` when
    /// neither a state directory nor a home directory is set.
    pub fn from_environment() -> RememberedDesignations {
        let variable = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
        let state = variable("CLOUDLY_STATE_DIR")
            .or_else(|| variable("XDG_STATE_HOME").map(|state| state.join("cloudly")))
            .or_else(|| variable("HOME").map(|home| home.join(".local/state/cloudly")));
        RememberedDesignations { directory: state.map(|state| state.join("designations")) }
    }

    fn path(&self, key: &DesignationKey<'_>) -> Option<PathBuf> {
        self.directory.as_ref().map(|directory| directory.join(key.file_name()))
    }

    /// The request remembered for `key`, if any.
    pub fn recall(&self, key: &DesignationKey<'_>) -> anyhow::Result<Option<Value>> {
        let Some(path) = self.path(key) else { return Ok(None) };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => anyhow::bail!("cannot read the remembered designation request {}: {error}", path.display()),
        };
        let remembered: Value = serde_json::from_str(&text).map_err(|error| {
            anyhow::anyhow!("the remembered designation request {} is not JSON: {error}", path.display())
        })?;
        let matches = remembered["clusterId"] == key.cluster
            && remembered["serviceId"] == key.service
            && remembered["mutationId"] == key.mutation_id;
        Ok(matches.then(|| remembered["request"].clone()))
    }

    /// Writes `request` for `key` (mode 0600), replacing what was there. Answers the file.
    pub fn remember(&self, key: &DesignationKey<'_>, request: &Value) -> anyhow::Result<PathBuf> {
        let (Some(directory), Some(path)) = (self.directory.as_ref(), self.path(key)) else {
            anyhow::bail!("no state directory: set CLOUDLY_STATE_DIR (or HOME)");
        };
        create_private_directory(directory)?;
        let remembered = json!({
            "clusterId": key.cluster,
            "serviceId": key.service,
            "mutationId": key.mutation_id,
            "request": request,
        });
        let partial = directory.join(format!(".{}.partial", key.file_name()));
        write_private_file(&partial, &serde_json::to_vec_pretty(&remembered).expect("JSON serializes"))?;
        std::fs::rename(&partial, &path)
            .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", path.display()))?;
        Ok(path)
    }
}

fn create_private_directory(directory: &Path) -> anyhow::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(directory).map_err(|error| anyhow::anyhow!("cannot create {}: {error}", directory.display()))
}

fn write_private_file(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    options
        .open(path)
        .and_then(|mut file| file.write_all(contents).and_then(|()| file.sync_all()))
        .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_recalled_only_for_its_own_key_and_kept_private() {
        let state = std::env::temp_dir().join(format!("cloudly-state-{}", uuid::Uuid::new_v4().simple()));
        let remembered = RememberedDesignations { directory: Some(state.join("designations")) };
        let key = DesignationKey { url: "http://127.0.0.1:8080", cluster: "c1", service: "ingress", mutation_id: "m1" };
        let request = json!({ "designation": { "mutationId": "m1" } });
        assert_eq!(remembered.recall(&key).unwrap(), None);
        let path = remembered.remember(&key, &request).unwrap();
        assert_eq!(remembered.recall(&key).unwrap(), Some(request.clone()));
        let trailing_slash = DesignationKey { url: "http://127.0.0.1:8080/", ..key };
        assert_eq!(remembered.recall(&trailing_slash).unwrap(), Some(request));
        for other in [
            DesignationKey { url: "http://other:8080", ..key },
            DesignationKey { cluster: "c2", ..key },
            DesignationKey { service: "web", ..key },
            DesignationKey { mutation_id: "m2", ..key },
        ] {
            assert_eq!(remembered.recall(&other).unwrap(), None);
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
            let directory = state.join("designations");
            assert_eq!(std::fs::metadata(directory).unwrap().permissions().mode() & 0o777, 0o700);
        }
        std::fs::remove_dir_all(state).unwrap();
    }
}
